//go:build !linux

package collectives

import "runtime"

// osYield gives the CPU to another goroutine.
func osYield() { runtime.Gosched() }
