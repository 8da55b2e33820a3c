package main

import (
	"os"
	"path/filepath"

	"github.com/gorun/gorun/peerargs"
)

// personalityWords are the first arguments that make gorun read the rest
// of its command line as that launcher's: gorun mpirun -np 4 ./prog.
var personalityWords = map[string]peerargs.Tool{
	"mpirun":   peerargs.MPIRun,
	"mpiexec":  peerargs.MPIExec,
	"torchrun": peerargs.TorchRun,
}

// personality reads args as another launcher's command line when gorun is
// called by that launcher's name (a symlink named mpirun, mpiexec,
// mpiexec.hydra, orterun, prterun or torchrun: argv[0]'s base name) or
// with it as its first argument (gorun mpirun ...). It returns gorun's
// main command line (args[0] first) and the launcher's name; tool is ""
// and out is args when they are gorun's own. The launcher's flags are
// read by its rules (package peerargs); gorun's own flags are taken where
// the launcher has none of the name. torchrun's programs run under
// $GORUN_PYTHON, else python3.
func personality(args []string) (out, notes []string, tool peerargs.Tool, err error) {
	rest := args[1:]
	tool, ok := peerargs.Named(filepath.Base(args[0]))
	if !ok && len(args) > 1 {
		if tool, ok = personalityWords[args[1]]; ok {
			rest = args[2:]
		}
	}
	if !ok {
		return args, nil, "", nil
	}
	tr, err := peerargs.Translate(tool, rest, peerargs.Options{Gorun: mainFlags(), Python: os.Getenv("GORUN_PYTHON")})
	if err != nil {
		return nil, nil, tool, err
	}
	return append([]string{args[0]}, tr.Args...), tr.Notes, tool, nil
}
