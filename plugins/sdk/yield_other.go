//go:build !linux

package sdk

import "runtime"

// osYield gives the CPU to another goroutine (sched_yield is Linux's).
func osYield() { runtime.Gosched() }
