package launcher

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// echoOnce listens on a free port of 127.0.0.1 and answers each line with
// tag and the line; it returns the listener's address.
func echoOnce(t *testing.T, tag string) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					fmt.Fprintf(c, "%s %s", tag, line)
				}
			}()
		}
	}()
	return ln, ln.Addr().String()
}

// A rank that connects to MASTER_PORT before rank 0 listens is not
// refused: its connection waits at the gate, and what it sent first
// reaches rank 0 once rank 0 listens. A later generation's rank 0, at
// another port, gets the connections made after the gate moved.
func TestMasterGate(t *testing.T) {
	g := openMasterGate()
	if g == nil {
		t.Fatal("no gate")
	}
	defer g.close()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", g.port))
	if err != nil {
		t.Fatalf("the gate refused a connection before rank 0 listens: %v", err)
	}
	defer c.Close()
	// Sent before rank 0 is there.
	io.WriteString(c, "hello\n")
	time.Sleep(100 * time.Millisecond)
	_, addr := echoOnce(t, "gen0")
	g.aim(addr)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || line != "gen0 hello\n" {
		t.Fatalf("through the gate: %q, %v", line, err)
	}

	// The target moves (a restart's rank 0 at a new port): new
	// connections go there, the old one stays where it was.
	_, addr1 := echoOnce(t, "gen1")
	g.aim(addr1)
	c1, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", g.port))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	io.WriteString(c1, "again\n")
	io.WriteString(c, "still\n")
	c1.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(c1).ReadString('\n'); err != nil || line != "gen1 again\n" {
		t.Errorf("after the move: %q, %v", line, err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "gen0 still\n" {
		t.Errorf("the first connection after the move: %q, %v", line, err)
	}

	// rank 0 closing its end closes the rank's. (Aimed first: a
	// connection goes where the gate points when it is passed on.)
	ln3, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln3.Close()
	g.aim(ln3.Addr().String())
	c2, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", g.port))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	ln3.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	s, err := ln3.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c2.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("rank 0 closed: the rank read %d, %v; want EOF", n, err)
	}
}

// Closed, the gate lets the port go (for a host without rank 0).
func TestMasterGateClose(t *testing.T) {
	g := openMasterGate()
	if g == nil {
		t.Fatal("no gate")
	}
	g.close()
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", g.port))
	if err != nil && !strings.Contains(err.Error(), "address already in use") {
		t.Fatal(err)
	}
	if err != nil {
		t.Errorf("the port is still held after close: %v", err)
		return
	}
	ln.Close()
}
