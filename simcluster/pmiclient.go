package simcluster

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// pmiClient speaks PMI-1's wire protocol, as MPICH's simple PMI does on
// PMI_FD.
type pmiClient struct {
	c net.Conn
	r *bufio.Reader
}

// call sends one command and reads its answer's fields.
func (p *pmiClient) call(line, want string) (map[string]string, error) {
	if _, err := p.c.Write([]byte(line + "\n")); err != nil {
		return nil, fmt.Errorf("PMI %q: %w", line, err)
	}
	ans, err := p.r.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("PMI %q: no answer: %w", line, err)
	}
	m := map[string]string{}
	for _, f := range strings.Fields(ans) {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	if m["cmd"] != want {
		return nil, fmt.Errorf("PMI %q: answer %q", line, strings.TrimSpace(ans))
	}
	if rc, ok := m["rc"]; ok && rc != "0" {
		return m, fmt.Errorf("PMI %q: answer %q", line, strings.TrimSpace(ans))
	}
	return m, nil
}

// Value is the value a simulated rank puts under its key: 48 bytes, about
// an MPI library's address of a rank.
func Value(rank int) string {
	s := "addr-" + strconv.Itoa(rank) + "-"
	return s + strings.Repeat("x", 48-len(s))
}

// Key is a simulated rank's key.
func Key(rank int) string { return "card-" + strconv.Itoa(rank) }

// fence is a rank's rendezvous: init, one put, the barrier, gets.
func (p *procs) fence(rk *rank, world int) error {
	pc := &pmiClient{c: rk.r.PMI, r: bufio.NewReader(rk.r.PMI)}
	if _, err := pc.call("cmd=init pmi_version=1 pmi_subversion=1", "response_to_init"); err != nil {
		return err
	}
	m, err := pc.call("cmd=get_my_kvsname", "my_kvsname")
	if err != nil {
		return err
	}
	kvs := m["kvsname"]
	me := rk.r.Rank
	if _, err := pc.call(fmt.Sprintf("cmd=put kvsname=%s key=%s value=%s", kvs, Key(me), Value(me)), "put_result"); err != nil {
		return err
	}
	now := time.Now()
	p.c.note(func(s *Stats) {
		if s.FenceIn.IsZero() || now.Before(s.FenceIn) {
			s.FenceIn = now
		}
		if now.After(s.FenceAll) {
			s.FenceAll = now
		}
	})
	if _, err := pc.call("cmd=barrier_in", "barrier_out"); err != nil {
		return err
	}
	out := time.Now()
	p.c.note(func(s *Stats) {
		if s.BarrierOut.IsZero() || out.Before(s.BarrierOut) {
			s.BarrierOut = out
		}
	})
	get := func(r int) error {
		m, err := pc.call(fmt.Sprintf("cmd=get kvsname=%s key=%s", kvs, Key(r)), "get_result")
		if err != nil {
			return err
		}
		if m["value"] != Value(r) {
			return fmt.Errorf("get %s: %q, want %q", Key(r), m["value"], Value(r))
		}
		return nil
	}
	if err := get((me + 1) % world); err != nil {
		return err
	}
	if k := p.c.cfg.Script.GetAllEvery; k > 0 && me%k == 0 {
		for r := range world {
			if err := get(r); err != nil {
				return err
			}
		}
	}
	_, err = pc.call("cmd=finalize", "finalize_ack")
	return err
}
