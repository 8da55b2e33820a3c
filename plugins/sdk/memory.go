package sdk

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/plugins/internal/wire"
)

// The control calls of device memory (Memory): each checks what it is
// given and calls the plugin's Memory.

func (s *server) memory() (Memory, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.inited:
		return nil, fmt.Errorf("%s: not initialized", s.p.Name)
	case s.mem == nil:
		return nil, fmt.Errorf("%s: %w: the plugin manages no device memory", s.p.Name, ErrNotSupported)
	}
	return s.mem, nil
}

func (s *server) DevAlloc(_ context.Context, req *wire.MemReq) (*wire.MemReply, error) {
	m, err := s.memory()
	if err != nil {
		return nil, err
	}
	if req.Bytes == 0 || req.Bytes > 1<<50 {
		return nil, fmt.Errorf("%s: allocation of %d bytes", s.p.Name, req.Bytes)
	}
	p, err := m.Alloc(int(req.Bytes))
	if err != nil {
		return nil, err
	}
	return &wire.MemReply{Ptr: p}, nil
}

func (s *server) DevFree(_ context.Context, req *wire.MemReq) (*wire.Empty, error) {
	m, err := s.memory()
	if err != nil {
		return nil, err
	}
	return &wire.Empty{}, m.Free(req.Ptr)
}

// shared returns the rank's shared memory that ref names.
func (s *server) shared(ref wire.Ref) ([]byte, error) {
	b, _, err := s.loop.refMem(ref)
	return b, err
}

func (s *server) DevWrite(_ context.Context, req *wire.MemReq) (*wire.Empty, error) {
	m, err := s.memory()
	if err != nil {
		return nil, err
	}
	src, err := s.shared(req.Ref)
	if err != nil {
		return nil, err
	}
	return &wire.Empty{}, m.Write(req.Ptr, int(req.Off), src)
}

func (s *server) DevRead(_ context.Context, req *wire.MemReq) (*wire.Empty, error) {
	m, err := s.memory()
	if err != nil {
		return nil, err
	}
	dst, err := s.shared(req.Ref)
	if err != nil {
		return nil, err
	}
	return &wire.Empty{}, m.Read(dst, req.Ptr, int(req.Off))
}

func (s *server) DevExport(_ context.Context, req *wire.MemReq) (*wire.MemReply, error) {
	m, err := s.memory()
	if err != nil {
		return nil, err
	}
	h, err := m.Export(req.Ptr)
	if err != nil {
		return nil, err
	}
	if len(h) == 0 || len(h) > 4096 {
		return nil, fmt.Errorf("%s: an export handle of %d bytes (1 to 4096 allowed)", s.p.Name, len(h))
	}
	return &wire.MemReply{Handle: h}, nil
}

func (s *server) DevImport(_ context.Context, req *wire.MemReq) (*wire.MemReply, error) {
	m, err := s.memory()
	if err != nil {
		return nil, err
	}
	p, err := m.Import(req.Handle)
	if err != nil {
		return nil, err
	}
	return &wire.MemReply{Ptr: p}, nil
}

func (s *server) DevCopy(_ context.Context, req *wire.MemReq) (*wire.Empty, error) {
	m, err := s.memory()
	if err != nil {
		return nil, err
	}
	return &wire.Empty{}, m.Copy(req.Ptr, int(req.Off), req.Src, int(req.SrcOff), int(req.Bytes))
}

func (s *server) DevReduce(_ context.Context, req *wire.MemReq) (*wire.Empty, error) {
	m, err := s.memory()
	if err != nil {
		return nil, err
	}
	return &wire.Empty{}, m.Reduce(req.Op, req.DType, req.Ptr, int(req.Off), req.Src, int(req.SrcOff), int(req.Count))
}
