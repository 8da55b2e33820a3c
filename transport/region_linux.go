package transport

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Alloc returns a new Region of size bytes (rounded up to whole pages),
// zeroed. Memory is committed as it is first touched.
func Alloc(size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("transport: alloc %d bytes: size must be positive", size)
	}
	page := unix.Getpagesize()
	size = (size + page - 1) / page * page
	fd, err := unix.MemfdCreate("gorun-region", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("transport: alloc: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("transport: alloc %d bytes: %w", size, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("transport: alloc %d bytes: mmap: %w", size, err)
	}
	r := &Region{id: regionIDs.Add(1), fd: fd, mem: mem}
	addRegion(r)
	return r, nil
}

func freeRegion(r *Region) error {
	err := unix.Munmap(r.mem)
	if cerr := unix.Close(r.fd); err == nil {
		err = cerr
	}
	r.mem = nil
	if err != nil {
		return fmt.Errorf("transport: free region %d: %w", r.id, err)
	}
	return nil
}
