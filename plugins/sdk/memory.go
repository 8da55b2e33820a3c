package sdk

import (
	"encoding/json"
	"fmt"

	"github.com/gorun/gorun/plugins/internal/wire"
	"github.com/gorun/gorun/transport"
)

// Device memory (Memory) is driven by work requests in the rings
// (wire.SQDev), as transfers are: a request costs microseconds where a
// control call costs a hundred. The loop carries them out in order, on
// its goroutine, each to its end before the next.

// device carries out one device memory request and completes it, with a
// MemReply as payload where there is something to return.
func (l *loop) device(id uint64, payload []byte) {
	var req wire.MemReq
	if err := json.Unmarshal(payload, &req); err != nil {
		l.complete(id, 0, fmt.Errorf("%w: device request: %v", transport.ErrProtocol, err), nil)
		return
	}
	if l.memory == nil {
		l.complete(id, 0, fmt.Errorf("%s: %w: the plugin manages no device memory", l.name, ErrNotSupported), nil)
		return
	}
	reply, err := l.memCall(l.memory, &req)
	var out []byte
	if err == nil && reply != nil {
		out, _ = json.Marshal(reply)
	}
	l.complete(id, 0, err, out)
}

// memCall calls m for req.
func (l *loop) memCall(m Memory, req *wire.MemReq) (*wire.MemReply, error) {
	switch req.Method {
	case "alloc":
		if req.Bytes == 0 || req.Bytes > 1<<50 {
			return nil, fmt.Errorf("%s: allocation of %d bytes", l.name, req.Bytes)
		}
		p, err := m.Alloc(int(req.Bytes))
		return &wire.MemReply{Ptr: p}, err
	case "free":
		return nil, m.Free(req.Ptr)
	case "write", "read":
		b, _, err := l.refMem(req.Ref)
		if err != nil {
			return nil, err
		}
		if req.Method == "write" {
			return nil, m.Write(req.Ptr, int(req.Off), b)
		}
		return nil, m.Read(b, req.Ptr, int(req.Off))
	case "export":
		h, err := m.Export(req.Ptr)
		if err == nil && (len(h) == 0 || len(h) > 4096) {
			err = fmt.Errorf("%s: an export handle of %d bytes (1 to 4096 allowed)", l.name, len(h))
		}
		return &wire.MemReply{Handle: h}, err
	case "import":
		p, err := m.Import(req.Handle)
		return &wire.MemReply{Ptr: p}, err
	case "copy":
		return nil, m.Copy(req.Ptr, int(req.Off), req.Src, int(req.SrcOff), int(req.Bytes))
	case "reduce":
		return nil, m.Reduce(req.Op, req.DType, req.Ptr, int(req.Off), req.Src, int(req.SrcOff), int(req.Count))
	}
	return nil, fmt.Errorf("%w: device request %q", transport.ErrProtocol, req.Method)
}
