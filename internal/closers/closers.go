// Package closers keeps the set of listeners and connections a transport
// opened, so that closing the transport closes them all.
package closers

import (
	"io"
	"sync"

	"github.com/gorun/gorun/transport"
)

// Set is the open listeners and connections of one transport. The zero
// value is ready to use.
type Set struct {
	mu     sync.Mutex
	closed bool
	open   map[io.Closer]struct{}
}

// Add remembers c; it fails with transport.ErrClosed once CloseAll ran.
func (s *Set) Add(c io.Closer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return transport.ErrClosed
	}
	if s.open == nil {
		s.open = make(map[io.Closer]struct{})
	}
	s.open[c] = struct{}{}
	return nil
}

// Remove forgets c (it closed on its own).
func (s *Set) Remove(c io.Closer) {
	s.mu.Lock()
	delete(s.open, c)
	s.mu.Unlock()
}

// CloseAll closes every remembered closer, in parallel, and refuses new
// ones from then on. It returns when all have closed.
func (s *Set) CloseAll() {
	s.mu.Lock()
	s.closed = true
	open := s.open
	s.open = nil
	s.mu.Unlock()
	var wg sync.WaitGroup
	for c := range open {
		wg.Add(1)
		go func() { defer wg.Done(); c.Close() }()
	}
	wg.Wait()
}
