// Command gorun launches and supervises parallel jobs: the ranks of an MPI,
// PyTorch or Go program on this machine and, later, across hosts.
package main

import (
	"fmt"
	"os"
)

func main() {
	code, err := run(os.Args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gorun: %v\n", err)
	}
	os.Exit(code)
}
