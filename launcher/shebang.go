package launcher

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode"
)

// badInterpreter says what is wrong with the #! interpreter of the script
// at path (a relative one is found from dir, as the kernel finds it from
// the working directory), and the exit status that goes with it; 0 and ""
// when path is no script or its interpreter can run. The kernel's exec
// reports a missing interpreter as ENOENT, which would read as if the
// script itself were missing.
//
// The statuses are the shells': bash and dash exit 127 when the
// interpreter is missing (exec failed with ENOENT, which they report as
// not found whatever the missing file) and 126 when it cannot be executed
// (EACCES), as for the program itself.
func badInterpreter(path, dir string) (code int, msg string) {
	p := interpreter(readHead(path, 256))
	if p == "" {
		return 0, ""
	}
	interp := p
	if strings.ContainsFunc(interp, unicode.IsControl) {
		interp = strconv.Quote(interp) // "/bin/sh\r": a script saved with CRLF line ends
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ExitNotFound, "bad interpreter: " + interp + ": no such file"
	case err != nil:
		return ExitNotExec, "bad interpreter: " + interp + ": " + err.Error()
	case st.IsDir() || st.Mode()&0o111 == 0:
		return ExitNotExec, "bad interpreter: " + interp + ": permission denied"
	}
	return 0, ""
}

// interpreter returns the interpreter's path of a #! line at the start of
// head ("" if there is none): the first word after #!, as Linux reads it
// (binfmt_script: spaces and tabs around it, the line ending at a newline
// or at the end of what was read).
func interpreter(head []byte) string {
	rest, ok := bytes.CutPrefix(head, []byte("#!"))
	if !ok {
		return ""
	}
	if i := bytes.IndexByte(rest, '\n'); i >= 0 {
		rest = rest[:i]
	}
	rest = bytes.TrimLeft(rest, " \t")
	if i := bytes.IndexAny(rest, " \t"); i >= 0 {
		rest = rest[:i]
	}
	return string(rest)
}

// pythonHint is what follows the message of a program that could not be
// executed when it is a Python script (its name ends in .py): how to
// run one. "" for any other program.
func pythonHint(prog string) string {
	if !strings.HasSuffix(prog, ".py") {
		return ""
	}
	return "; it is a Python script: run it as python3 " + prog + ", or with gorun torchrun " + prog
}

// pythonHintHere is pythonHint for a program not found in PATH, when a
// file of that name is in the ranks' working directory dir (as a shell,
// gorun does not look there).
func pythonHintHere(prog, dir string) string {
	if st, err := os.Stat(filepath.Join(dir, prog)); err != nil || st.IsDir() {
		return ""
	}
	return pythonHint(prog)
}

// execHint is pythonHint for a program whose exec failed with err: a
// script without a #! line (ENOEXEC), or not executable.
func execHint(prog string, err error) string {
	if errors.Is(err, syscall.ENOEXEC) || errors.Is(err, syscall.EACCES) {
		return pythonHint(prog)
	}
	return ""
}
