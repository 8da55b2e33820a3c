//go:build !amd64 && !arm64

package stacks

// syscallNames names the system calls a blocked process is most often
// found in: here those that every Linux architecture numbers alike.
var syscallNames = commonSyscalls
