//go:build !cgo

// Command gorun-pmix is gorun's PMIx plugin. It links libpmix with cgo:
// this build has no cgo, so it only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "gorun-pmix: built without cgo; rebuild with CGO_ENABLED=1 and libpmix-dev installed")
	os.Exit(1)
}
