// Package md2man stands in for github.com/cpuguy83/go-md2man/v2/md2man in
// gorun's builds (go.mod replaces the module with this directory).
//
// urfave/cli v2 links go-md2man, and through it blackfriday, for its
// App.ToMan, which gorun never calls (its man pages are written by hand,
// in man/). blackfriday's initialisation costs some 0.4 ms of every start
// of a gorun process; urfave/cli's own way out is a build tag
// (urfave_cli_no_docs), which `go install` would not pass. This stand-in
// keeps the one function urfave/cli calls and links nothing.
package md2man

// Render returns doc, the markdown that urfave/cli's ToMan produces,
// unconverted: gorun has no roff renderer linked.
func Render(doc []byte) []byte { return doc }
