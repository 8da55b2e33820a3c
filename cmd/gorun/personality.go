package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/peerargs"
)

// personality reads args as another launcher's command line when gorun is
// called by that launcher's name (a symlink named mpirun, mpiexec,
// mpiexec.hydra, orterun, prterun, torchrun, horovodrun or deepspeed:
// argv[0]'s base name) or with it as its first argument (gorun mpirun ...,
// gorun mpiexec.hydra ..., gorun python3 -m torch.distributed.run ...).
// It returns gorun's main command line (args[0] first) and the launcher's
// name; tool is "" and out is args when they are gorun's own. The
// launcher's flags are read by its rules (package peerargs); gorun's own
// flags are taken where the launcher has none of the name. torchrun's
// and DeepSpeed's programs run under pythonFor's interpreter.
func personality(args []string) (out, notes []string, tool peerargs.Tool, err error) {
	rest := args[1:]
	python, module := "", ""
	tool, ok := peerargs.Named(filepath.Base(args[0]))
	if !ok && len(args) > 1 {
		if tool, ok = peerargs.Named(args[1]); ok {
			rest = args[2:]
		} else if t, py, ok2 := pythonModule(args[1:]); ok2 {
			tool, ok, python, module, rest = t, true, py, args[3], args[4:]
		}
	}
	if !ok {
		return args, nil, "", nil
	}
	o := peerargs.Options{Gorun: mainFlags(), ReadFile: os.ReadFile, Module: module, Environ: os.Environ()}
	var why string
	if tool == peerargs.TorchRun || tool == peerargs.DeepSpeed {
		o.Python, why = pythonFor(python, string(tool))
	}
	tr, err := peerargs.Translate(tool, rest, o)
	if err != nil {
		return nil, nil, tool, err
	}
	if why != "" && usesPython(tr.Args, o.Python) {
		if err := checkTorch(o.Python, why); err != nil {
			return nil, nil, tool, fmt.Errorf("%s: %w", tool, err)
		}
	}
	return append([]string{args[0]}, tr.Args...), tr.Notes, tool, nil
}

// pythonName matches the names of Python's interpreters: python,
// python3, python3.11.
var pythonName = regexp.MustCompile(`^python[0-9.]*$`)

// pythonModule recognises `python -m MODULE` as a launcher's command
// (python -m torch.distributed.run is torchrun, and so is its
// predecessor torch.distributed.launch): args are the command,
// the interpreter first. python is the interpreter as given.
func pythonModule(args []string) (tool peerargs.Tool, python string, ok bool) {
	if len(args) < 3 || !pythonName.MatchString(filepath.Base(args[0])) || args[1] != "-m" {
		return "", "", false
	}
	tool, ok = peerargs.Modules[args[2]]
	return tool, args[0], ok
}

// pythonFor returns the interpreter that the programs of command
// (torchrun, deepspeed) run under, and why that one (for the message when
// it lacks torch): given (python -m torch.distributed.run's own), else
// $GORUN_PYTHON, else the interpreter of the command found in PATH (its
// #! line), as the command runs them under its own, else python3. why is
// "" when the user chose it ($GORUN_PYTHON).
func pythonFor(given, command string) (python, why string) {
	if given != "" {
		return given, "the interpreter gorun was given"
	}
	if p := os.Getenv("GORUN_PYTHON"); p != "" {
		return p, ""
	}
	if path, err := exec.LookPath(command); err == nil {
		if py := shebangPython(path); py != "" {
			return py, "the interpreter of " + path
		}
	}
	return "python3", "python3 from PATH: no " + command + " in PATH"
}

// shebangPython returns the Python interpreter of a script's #! line
// ("#!/usr/bin/python3.11", "#!/usr/bin/env python3"), or "".
func shebangPython(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" || !strings.HasPrefix(line, "#!") {
		return ""
	}
	fields := strings.Fields(strings.TrimPrefix(line, "#!"))
	if len(fields) == 0 {
		return ""
	}
	if filepath.Base(fields[0]) == "env" && len(fields) > 1 {
		fields = fields[1:]
	}
	if !pythonName.MatchString(filepath.Base(fields[0])) {
		return ""
	}
	return fields[0]
}

// usesPython reports whether the translated command line runs its
// program under python (torchrun without --no-python).
func usesPython(args []string, python string) bool {
	for i, a := range args {
		if a == python && i+1 < len(args) && args[i+1] == "-u" && (i == 0 || args[i-1] != "-x") {
			return true
		}
	}
	return false
}

// checkTorch says, when python has no torch module, which interpreter
// gorun used and why, and how to choose another: a rank would fail with
// "No module named 'torch'" otherwise. A python that cannot be run is
// left for the ranks to report.
func checkTorch(python, why string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", "import importlib.util as u, sys; sys.exit(3 if u.find_spec('torch') is None else 0)")
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		return fmt.Errorf("%s (%s) has no torch module: set GORUN_PYTHON to the Python that has torch (GORUN_PYTHON=/path/to/python gorun torchrun ...)", python, why)
	}
	return nil
}

// launcherProgram refuses a job whose program is an MPI launcher (gorun
// -np 2 mpirun ./prog would start a job of its own on every rank), and
// returns a note for one that runs another launcher (torchrun,
// horovodrun, deepspeed: each rank starts its own): both name the
// personality that reads that command line.
func launcherProgram(argv []string, np int) (note string, err error) {
	tool, ok := peerargs.LauncherProgram(argv)
	if !ok {
		return "", nil
	}
	way := "gorun " + string(tool) + " " + strings.Join(argv[1:], " ")
	if _, _, ok := pythonModule(argv); ok {
		way = "gorun " + strings.Join(argv, " ") // gorun python3 -m torch.distributed.run ...
	}
	if tool == peerargs.MPIRun || tool == peerargs.MPIExec {
		ranks := "every rank"
		if np > 0 {
			ranks = fmt.Sprintf("each of the %d ranks", np)
		}
		return "", fmt.Errorf("%w: the program %s is a launcher: %s would start a job of its own; run %s (gorun reads %s's command line)",
			launcher.ErrUsage, argv[0], ranks, strings.TrimSpace(way), tool)
	}
	return fmt.Sprintf("the program %s is a launcher: each rank starts its own; %s runs the job itself", argv[0], strings.TrimSpace(way)), nil
}
