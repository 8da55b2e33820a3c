// Command gorun-tools is gorun's companion program: the ranks of `gorun
// bench`, and the plugin host of `gorun plugins` and of a job's
// --plugin-check. gorun runs it from next to itself, and refuses one of
// another build; see package github.com/gorun/gorun/internal/tools.
package main

import (
	"os"

	"github.com/gorun/gorun/internal/tools"
)

func main() { os.Exit(tools.Main(os.Args, os.Stdout, os.Stderr)) }
