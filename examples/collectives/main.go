// Command collectives is a Go rank that uses gorun's collectives: it joins
// the job's communicator with collectives.Init, runs every collective on
// data whose result it knows, and prints PASS. Build it with
// `go build ./examples/collectives` and run it as `gorun -np 4
// ./collectives`.
//
// With the arguments "die R", rank R kills itself (SIGKILL) in the middle
// of a large AllReduce; the other ranks ignore gorun's SIGTERM long enough
// to print the error their collective returns, naming rank R. With
// "device-die R" the same happens in AllReduceDevice on device buffers
// (run it with --device cuda).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/gorun/gorun/collectives"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := collectives.Init(ctx, &collectives.Options{Timeout: time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, "examples/collectives:", err)
		os.Exit(1)
	}
	if len(os.Args) == 3 && (os.Args[1] == "die" || os.Args[1] == "device-die") {
		victim, _ := strconv.Atoi(os.Args[2])
		os.Exit(die(ctx, c, victim, os.Args[1] == "device-die"))
	}
	if err := check(ctx, c); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: FAIL: %v\n", c.Rank(), err)
		os.Exit(1)
	}
	fmt.Printf("rank %d of %d: collectives PASS over %s on %d hosts\n", c.Rank(), c.Size(), c.Transports(), c.Hosts())
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "examples/collectives:", err)
		os.Exit(1)
	}
}

// check runs each collective once and compares with what it must give.
func check(ctx context.Context, c *collectives.Communicator) error {
	n, r := c.Size(), c.Rank()
	const per = 100_003 // elements per rank's block: odd, and above the transports' eager limit
	// AllReduce: rank r contributes r+1 everywhere.
	buf := make([]float64, per)
	for i := range buf {
		buf[i] = float64(r + 1 + i%3)
	}
	if err := collectives.AllReduce(ctx, c, buf, collectives.Sum); err != nil {
		return err
	}
	for i, v := range buf {
		if want := float64(n*(n+1)/2 + n*(i%3)); v != want {
			return fmt.Errorf("allreduce: element %d is %v, want %v", i, v, want)
		}
	}
	// Broadcast from the last rank.
	b := make([]int32, 5)
	if r == n-1 {
		copy(b, []int32{7, 1, 4, 1, 5})
	}
	if err := collectives.Broadcast(ctx, c, b, n-1); err != nil {
		return err
	}
	if fmt.Sprint(b) != "[7 1 4 1 5]" {
		return fmt.Errorf("broadcast: got %v", b)
	}
	// AllGather: rank r's block is all r.
	send := make([]int64, per)
	for i := range send {
		send[i] = int64(r)
	}
	all := make([]int64, per*n)
	if err := collectives.AllGather(ctx, c, send, all); err != nil {
		return err
	}
	for i, v := range all {
		if v != int64(i/per) {
			return fmt.Errorf("allgather: element %d is %d, want %d", i, v, i/per)
		}
	}
	// ReduceScatter of ones: every element of every block is n.
	ones := make([]float32, per*n)
	for i := range ones {
		ones[i] = 1
	}
	mine := make([]float32, per)
	if err := collectives.ReduceScatter(ctx, c, ones, mine, collectives.Sum); err != nil {
		return err
	}
	for i, v := range mine {
		if v != float32(n) {
			return fmt.Errorf("reducescatter: element %d is %v, want %d", i, v, n)
		}
	}
	// AllToAll: block j of rank r holds r*n+j; rank r receives j*n+r from j.
	out, in := make([]int32, 3*n), make([]int32, 3*n)
	for i := range out {
		out[i] = int32(r*n + i/3)
	}
	if err := collectives.AllToAll(ctx, c, out, in); err != nil {
		return err
	}
	for i, v := range in {
		if want := int32((i/3)*n + r); v != want {
			return fmt.Errorf("alltoall: element %d is %d, want %d", i, v, want)
		}
	}
	// Send/Recv around the ring.
	if n > 1 {
		msg := []uint8{uint8(r), 42}
		req := collectives.SendAsync(ctx, c, msg, (r+1)%n, 9)
		got := make([]uint8, 2)
		if err := collectives.Recv(ctx, c, got, (r+n-1)%n, 9); err != nil {
			return err
		}
		if err := req.Wait(); err != nil {
			return err
		}
		if got[0] != uint8((r+n-1)%n) || got[1] != 42 {
			return fmt.Errorf("recv: got %v", got)
		}
	}
	// A sub-communicator per parity, and an AllReduce in each.
	sub, err := c.Split(ctx, r%2, r)
	if err != nil {
		return err
	}
	x := []int64{int64(r)}
	if err := collectives.AllReduce(ctx, sub, x, collectives.Max); err != nil {
		return err
	}
	if last := (n - 1) - (n-1-r)%2; x[0] != int64(last) {
		return fmt.Errorf("split allreduce: got %d, want %d", x[0], last)
	}
	if err := sub.Close(); err != nil {
		return err
	}
	return c.Barrier(ctx)
}

// die runs large AllReduces (on device buffers, with device) until the
// victim kills itself halfway through one; the others report the error
// they get and exit 3.
func die(ctx context.Context, c *collectives.Communicator, victim int, device bool) int {
	signal.Ignore(syscall.SIGTERM) // keep running until the error comes
	buf := make([]float32, 8<<20)
	var dev *collectives.DeviceBuffer
	if device {
		var err error
		if dev, err = c.AllocDevice(ctx, 4*len(buf)); err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: %v\n", c.Rank(), err)
			return 1
		}
	}
	for i := 0; ; i++ {
		if i == 3 && c.Rank() == victim {
			go func() {
				time.Sleep(2 * time.Millisecond)
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}()
		}
		var err error
		if device {
			err = collectives.AllReduceDevice(ctx, c, dev, collectives.Float32, collectives.Sum)
		} else {
			err = collectives.AllReduce(ctx, c, buf, collectives.Sum)
		}
		if err != nil {
			var pe *collectives.PeerError
			if errors.As(err, &pe) {
				fmt.Fprintf(os.Stderr, "rank %d: error names rank %d: %v\n", c.Rank(), pe.Rank, err)
			} else {
				fmt.Fprintf(os.Stderr, "rank %d: error: %v\n", c.Rank(), err)
			}
			return 3
		}
	}
}
