package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/gorun/gorun/plugins/sdk"
)

// A gorun connection is one or more TCP connections (streams) from the
// sending side to the listener. Each stream opens with a 16-byte hello:
// "tcpx", the connection's random id, the stream's index and the number
// of streams. The listener gathers a connection's streams by id and
// returns the receive side once all are there.
//
// The streams beyond the first carry nothing of this plugin's: they are
// for the hand-off. When the rank allows it (sdk.Config.Handoff), the SDK
// calls HandOff on every new connection and gives its sockets to the
// rank, which then moves the data itself with gorun's built-in TCP
// protocol (striping large messages over the streams), and this plugin
// leaves the data path: it only chose the address and opened the
// connections. Without a hand-off, a connection has one stream and
// conn.go's frames go on it.
const (
	helloSize  = 16
	helloMagic = "tcpx"
	// helloTimeout bounds how long a stream may take to send its hello,
	// and a connection to open all its streams.
	helloTimeout = 10 * time.Second
	// maxStreams is the most streams one connection may have (the SDK
	// takes at most 16 sockets per connection).
	maxStreams = 16
	// defaultStreams is the streams per connection when the rank adopts
	// them: 2, as gorun's built-in TCP transport opens.
	defaultStreams = 2
)

// hello opens each stream.
type hello struct {
	id    [8]byte
	index int
	count int
}

func (h hello) marshal() []byte {
	b := make([]byte, helloSize)
	copy(b, helloMagic)
	copy(b[4:12], h.id[:])
	b[12], b[13] = byte(h.index), byte(h.count)
	return b
}

func parseHello(b []byte) (hello, error) {
	var h hello
	if len(b) != helloSize || string(b[:4]) != helloMagic {
		return h, fmt.Errorf("not a tcpexample hello")
	}
	copy(h.id[:], b[4:12])
	h.index, h.count = int(b[12]), int(b[13])
	if h.count < 1 || h.count > maxStreams || h.index >= h.count {
		return h, fmt.Errorf("hello for stream %d of %d", h.index, h.count)
	}
	return h, nil
}

// streamsFor returns the number of streams per connection: the "streams"
// option (1 to 16) when the rank adopts sockets, else 1.
func streamsFor(cfg sdk.Config) (int, error) {
	if !cfg.Handoff {
		return 1, nil
	}
	text := cfg.Options["streams"]
	if text == "" {
		return defaultStreams, nil
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < 1 || n > maxStreams {
		return 0, fmt.Errorf("option streams=%q: want a number from 1 to %d", text, maxStreams)
	}
	return n, nil
}

// HandOff implements sdk.Handoff: it duplicates the streams of conn (a
// connection on which nothing was sent or received), closes the plugin's
// own descriptors (the duplicates keep the sockets open: nothing is shut
// down) and forgets the connection.
func (t *tcpTransport) HandOff(conn any) ([]*os.File, error) {
	var socks []*net.TCPConn
	var closeConn func() error
	switch c := conn.(type) {
	case *sendConn:
		socks, closeConn = c.socks, c.Close
	case *recvConn:
		socks, closeConn = c.socks, c.Close
	default:
		return nil, fmt.Errorf("tcpexample: hand-off of a %T", conn)
	}
	files := make([]*os.File, 0, len(socks))
	for _, s := range socks {
		f, err := s.File()
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("tcpexample: hand-off: %w", err)
		}
		files = append(files, f)
	}
	closeConn()
	return files, nil
}
