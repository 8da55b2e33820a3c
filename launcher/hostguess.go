// This file holds the did-you-mean of a host name that does not resolve
// (a typo: -H h1,hh2): the closest name this machine knows of.

package launcher

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/gorun/gorun/hostfile"
)

// knownHostFiles are where this machine names hosts: /etc/hosts, the
// user's ssh config (its Host lines) and known_hosts (the names it keeps
// unhashed). A variable, for the tests.
var knownHostFiles = func() []string {
	home, _ := os.UserHomeDir()
	return []string{"/etc/hosts", filepath.Join(home, ".ssh", "config"), filepath.Join(home, ".ssh", "known_hosts")}
}

// knownHostNames returns the host names that files name, in the order
// found: /etc/hosts' names (each line's after its address), an ssh
// config's Host patterns without wildcards, known_hosts' unhashed names
// ([host]:port as host).
func knownHostNames(files []string) []string {
	var names []string
	seen := map[string]bool{}
	add := func(n string) {
		n = strings.TrimSpace(n)
		if strings.HasPrefix(n, "[") {
			n, _, _ = strings.Cut(strings.TrimPrefix(n, "["), "]")
		}
		if n == "" || seen[n] || strings.ContainsAny(n, "*?!|") {
			return
		}
		seen[n] = true
		names = append(names, n)
	}
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for n := 0; sc.Scan() && n < 100000; n++ {
			line, _, _ := strings.Cut(sc.Text(), "#")
			fields := strings.Fields(line)
			if len(fields) < 2 {
				continue
			}
			switch {
			case strings.EqualFold(fields[0], "host"): // ssh config
				for _, h := range fields[1:] {
					add(h)
				}
			case net.ParseIP(fields[0]) != nil: // /etc/hosts
				for _, h := range fields[1:] {
					add(h)
				}
			case strings.Contains(filepath.Base(path), "known_hosts"):
				if !strings.HasPrefix(fields[0], "|") && !strings.HasPrefix(fields[0], "@") {
					for _, h := range strings.Split(fields[0], ",") {
						add(h)
					}
				}
			}
		}
		f.Close()
	}
	return names
}

// withHostGuess adds to err, a failure to reach host, the closest name
// this machine knows when host's name does not resolve: a typo (hh2 for
// h2) says so rather than only "no such host".
func withHostGuess(err error, host string) error {
	var dns *net.DNSError
	if err == nil || !errors.As(err, &dns) || !dns.IsNotFound {
		return err
	}
	if guess := hostfile.Closest(host, knownHostNames(knownHostFiles())); guess != "" {
		return fmt.Errorf("%w (did you mean %s?)", err, guess)
	}
	return err
}
