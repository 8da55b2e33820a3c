//go:build !linux

package transport

import "fmt"

// Alloc returns ErrNotSupported: Regions need Linux's memfd_create.
func Alloc(size int) (*Region, error) {
	return nil, fmt.Errorf("transport: alloc: %w", ErrNotSupported)
}

func freeRegion(r *Region) error { return nil }
