package simcluster

import (
	"bytes"
	"io"
	"time"

	"github.com/gorun/gorun/launcher"
)

// Options returns the head's options for a job of ranksPerHost ranks on
// every host of c, started by c, with the launch tree's fanout (0: flat,
// -1: gorun's default). The program is /bin/true, which a simulated rank
// does not run, and the output goes to the writers given (nil: dropped).
func (c *Cluster) Options(ranksPerHost, fanout int, stdout, stderr io.Writer) launcher.Options {
	hosts := c.Hosts()
	for i := range hosts {
		hosts[i].Slots = ranksPerHost
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	return launcher.Options{
		Argv: []string{"/bin/true"}, Hosts: hosts,
		Plan:    launcher.PlanOptions{NP: ranksPerHost * len(hosts), Source: "simcluster"},
		Starter: c, Fanout: fanout, BindTo: "none", PMIx: launcher.PMIxOff,
		PrintEnv: -1, StdinRank: -1, Stdin: bytes.NewReader(nil), Stdout: stdout, Stderr: stderr,
		Grace: 2 * time.Second, Version: "sim",
	}
}
