package gridenginetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"os/exec"
	"strings"
	"time"
)

// routeMetric is the metric of the unreachable route: high, so that it
// never shadows a real route to the same prefix.
const routeMetric = "9999"

// claimSubnet picks 10.215.X.0/24, where X is free: no address or route of
// this machine overlaps it. It claims X by adding `unreachable
// 10.215.X.0/24 metric 9999` to the root namespace, which fails with EEXIST
// if another cluster has just claimed it.
func (c *Cluster) claimSubnet(ctx context.Context) error {
	used, err := usedPrefixes(ctx)
	if err != nil {
		return err
	}
	r, err := rand.Int(rand.Reader, big.NewInt(256))
	if err != nil {
		return fmt.Errorf("gridenginetest: %w", err)
	}
	start := int(r.Int64())
	for k := range 256 {
		x := (start + k) % 256
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 215, byte(x), 0}), 24)
		if overlaps(p, used) {
			continue
		}
		out, err := runIP(ctx, "route", "add", "unreachable", p.String(), "metric", routeMetric)
		if err != nil {
			if strings.Contains(out, "File exists") {
				continue
			}
			return fmt.Errorf("gridenginetest: ip route add unreachable %s: %w: %s", p, err, out)
		}
		c.Subnet, c.route = p, true
		return nil
	}
	return fmt.Errorf("gridenginetest: no free 10.215.X.0/24 (all 256 overlap an address or route of this machine, or are other clusters')")
}

// releaseSubnet deletes the unreachable route of the cluster's subnet.
func (c *Cluster) releaseSubnet() error {
	if !c.route {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := runIP(ctx, "route", "del", "unreachable", c.Subnet.String(), "metric", routeMetric)
	if err != nil && !strings.Contains(out, "No such process") {
		return fmt.Errorf("gridenginetest: ip route del unreachable %s: %w: %s", c.Subnet, err, out)
	}
	c.route = false
	return nil
}

// runIP runs ip (iproute2) in this namespace and returns its output.
func runIP(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// overlaps reports whether p overlaps one of used.
func overlaps(p netip.Prefix, used []netip.Prefix) bool {
	for _, u := range used {
		if u.Overlaps(p) {
			return true
		}
	}
	return false
}

// usedPrefixes returns the IPv4 prefixes of this machine's addresses and of
// its routes in every table, but for default routes.
func usedPrefixes(ctx context.Context) ([]netip.Prefix, error) {
	var used []netip.Prefix
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "-j", "-4", "addr", "show").Output()
	if err != nil {
		return nil, fmt.Errorf("gridenginetest: ip -j -4 addr show: %w", err)
	}
	var links []struct {
		AddrInfo []struct {
			Local     string `json:"local"`
			Prefixlen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return nil, fmt.Errorf("gridenginetest: ip -j -4 addr show: %w", err)
	}
	for _, l := range links {
		for _, a := range l.AddrInfo {
			if ad, err := netip.ParseAddr(a.Local); err == nil {
				if p, err := ad.Prefix(a.Prefixlen); err == nil {
					used = append(used, p)
				}
			}
		}
	}
	out, err = exec.CommandContext(ctx, "ip", "-j", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("gridenginetest: ip -j -4 route show table all: %w", err)
	}
	var routes []struct {
		Dst string `json:"dst"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &routes); err != nil {
		return nil, fmt.Errorf("gridenginetest: ip -j -4 route show table all: %w", err)
	}
	for _, r := range routes {
		if r.Dst == "" || r.Dst == "default" {
			continue
		}
		dst := r.Dst
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if p, err := netip.ParsePrefix(dst); err == nil && p.Bits() > 0 {
			used = append(used, p.Masked())
		}
	}
	return used, nil
}

// makeNetwork joins the hosts: a bridge with the qmaster's address in the
// qmaster host's namespace, and for each exec host a veth from that bridge
// to the host's eth0 with its address. Nothing is made in the root
// namespace.
func (c *Cluster) makeNetwork(ctx context.Context) error {
	bits := c.Subnet.Bits()
	var b strings.Builder
	fmt.Fprintf(&b, "link add br0 type bridge\naddr add %s/%d dev br0\nlink set br0 up\n", c.master.Addr, bits)
	for i, n := range c.nodes {
		h := c.holder(n.Name)
		fmt.Fprintf(&b, "link add ve%d type veth peer name eth0 netns %d\nlink set ve%d master br0 up\n", i+1, h.Pid, i+1)
	}
	if err := c.ipBatch(ctx, MasterHost, b.String()); err != nil {
		return err
	}
	for _, n := range c.nodes {
		if err := c.ipBatch(ctx, n.Name, fmt.Sprintf("addr add %s/%d dev eth0\nlink set eth0 up\n", n.Addr, bits)); err != nil {
			return err
		}
	}
	return nil
}

// ipBatch runs `ip -batch -` with cmds in host's network namespace.
func (c *Cluster) ipBatch(ctx context.Context, host, cmds string) error {
	nsArgs, files, err := c.enter(host)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append(nsArgs[:1], "--", "ip", "-batch", "-")...)
	cmd.ExtraFiles = files
	cmd.Stdin = strings.NewReader(cmds)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("gridenginetest: ip -batch in host %s: %w: %s (commands: %q)", host, err, strings.TrimSpace(string(out)), cmds)
	}
	return nil
}
