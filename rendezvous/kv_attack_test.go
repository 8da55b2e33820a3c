package rendezvous

import (
	"bytes"
	"context"
	"encoding/binary"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// Attack 1b of the security review: guessing the secret. Near misses (one
// byte off, one byte short or long, empty, another of the same length) are
// all refused on the agent's socket, a hello over 4 KiB is not even read,
// and the genuine rank still gets in after them.
func TestKVSecretGuesses(t *testing.T) {
	t.Parallel()
	st, _ := NewStore(1, StoreOptions{})
	path, _ := startKV(t, []int{0}, st.Member(0, 0), nil)
	ctx := context.Background()
	last := append(bytes.Clone(testSecret[:len(testSecret)-1]), testSecret[len(testSecret)-1]^1)
	for name, guess := range map[string][]byte{
		"empty":          nil,
		"one byte short": testSecret[:len(testSecret)-1],
		"one byte long":  append(bytes.Clone(testSecret), '0'),
		"last byte off":  last,
		"same length":    bytes.Repeat([]byte("a"), len(testSecret)),
	} {
		if c, err := Dial(ctx, path, guess, 0); err == nil || !strings.Contains(err.Error(), "authentication failed") {
			if c != nil {
				c.Close()
			}
			t.Errorf("%s guess: %v, want authentication failed", name, err)
		}
	}
	// A hello of more than 4 KiB: the connection is closed unanswered.
	if c, err := Dial(ctx, path, bytes.Repeat([]byte("a"), 4096), 0); err == nil {
		c.Close()
		t.Error("a 4 KiB secret was accepted")
	}
	c, err := Dial(ctx, path, testSecret, 0)
	if err != nil {
		t.Fatalf("the genuine rank after the guesses: %v", err)
	}
	c.Close()
}

// The secret is compared in constant time: in the methods that serve a
// connection (KVServer's and kvSession's), the configured secret is only
// ever an argument of subtle.ConstantTimeCompare (a ==, bytes.Equal or
// string comparison would tell a guesser, by its time, how many leading
// bytes were right).
func TestKVSecretComparedInConstantTime(t *testing.T) {
	t.Parallel()
	var serving []*ast.FuncDecl
	subtle := false // whether the file of the secret's comparison imports crypto/subtle
	for _, name := range []string{"kv.go", "kvsession.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil {
				if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
					if n := star.X.(*ast.Ident).Name; n == "KVServer" || n == "kvSession" {
						serving = append(serving, fd)
					}
				}
			}
		}
		for _, im := range f.Imports {
			subtle = subtle || im.Path.Value == `"crypto/subtle"`
		}
	}
	if !slices.ContainsFunc(serving, func(fd *ast.FuncDecl) bool { return fd.Name.Name == "ServeConn" }) {
		t.Fatal("kv.go has no (*KVServer).ServeConn")
	}
	uses, constant := 0, 0
	var stack []ast.Node
	inspect := func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Secret" {
			uses++
			if call, ok := stack[len(stack)-1].(*ast.CallExpr); ok {
				if fn, ok := call.Fun.(*ast.SelectorExpr); ok && fn.Sel.Name == "ConstantTimeCompare" {
					if pkg, ok := fn.X.(*ast.Ident); ok && pkg.Name == "subtle" {
						constant++
					}
				}
			}
		}
		stack = append(stack, n)
		return true
	}
	for _, fd := range serving {
		ast.Inspect(fd.Body, inspect)
	}
	if uses == 0 || constant != uses {
		t.Errorf("the KV server's methods use the secret %d times, %d of them in subtle.ConstantTimeCompare; want every use there", uses, constant)
	}
	if !subtle {
		t.Error(`neither kv.go nor kvsession.go imports "crypto/subtle"`)
	}
}

// Attack 3d of the security review, before the hello: a client that sends
// a length of 1 GiB, or a 4 KiB frame of junk, and then goes on writing
// (up to 1 GiB) is cut off at once, having got at most what the socket
// buffers hold into the server; one that says nothing, or dribbles a
// valid hello a byte at a time, is closed 10 s after it connected.
func TestKVBeforeHello(t *testing.T) {
	t.Parallel()
	st, _ := NewStore(1, StoreOptions{})
	path, _ := startKV(t, []int{0}, st.Member(0, 0), nil)
	flood := func(t *testing.T, head []byte) {
		t.Helper()
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		start := time.Now()
		written, err := c.Write(head)
		chunk := make([]byte, 1<<20)
		for err == nil && written < 1<<30 {
			var n int
			n, err = c.Write(chunk)
			written += n
		}
		if err == nil || written > 16<<20 {
			t.Fatalf("the server took %d MiB before the hello (write error %v); want the connection cut off", written>>20, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("cut off after %v; want at once", d)
		}
		t.Logf("cut off after %d KiB (%v)", written>>10, err)
	}
	t.Run("1 GiB length", func(t *testing.T) {
		t.Parallel()
		flood(t, binary.BigEndian.AppendUint32(nil, 1<<30))
	})
	t.Run("4 KiB of junk", func(t *testing.T) {
		t.Parallel()
		flood(t, append(binary.BigEndian.AppendUint32(nil, 4096), bytes.Repeat([]byte{'P'}, 4096)...))
	})
	closedAfter := func(t *testing.T, c net.Conn) time.Duration {
		t.Helper()
		start := time.Now()
		c.SetReadDeadline(start.Add(20 * time.Second))
		_, err := io.Copy(io.Discard, c)
		d := time.Since(start)
		if err != nil {
			t.Fatalf("the server did not close the connection within %v: %v", d, err)
		}
		return d
	}
	t.Run("silent", func(t *testing.T) {
		t.Parallel()
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if d := closedAfter(t, c); d < 9*time.Second || d > 13*time.Second {
			t.Errorf("a silent client was closed after %v, want 10 s", d)
		}
	})
	t.Run("dribble", func(t *testing.T) {
		t.Parallel()
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hello := encodeFrame(opHello, string(testSecret), "0")
		go func() {
			for _, b := range hello[:len(hello)-1] { // never the last byte
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(300 * time.Millisecond)
			}
		}()
		if d := closedAfter(t, c); d < 9*time.Second || d > 13*time.Second {
			t.Errorf("a client dribbling its hello was closed after %v, want 10 s from its connect", d)
		}
	})
	t.Cleanup(func() {
		// The genuine rank still gets in after all of them.
		c, err := Dial(context.Background(), path, testSecret, 0)
		if err != nil {
			t.Errorf("the genuine rank after the attacks: %v", err)
			return
		}
		c.Close()
	})
}
