//go:build ignore

// hello is the smallest Go program: startcost.sh times its start as the
// floor any Go process pays.
package main

import "os"

func main() { os.Stdout.WriteString("hello\n") }
