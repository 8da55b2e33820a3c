package sshclient

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	ssh := filepath.Join(home, ".ssh")
	defKH := []string{filepath.Join(ssh, "known_hosts"), filepath.Join(ssh, "known_hosts2")}
	newD := func(o Options) *Dialer {
		o.Home, o.ConfigFile, o.AgentSocket = home, "testdata/ssh_config", "none"
		d, err := NewDialer(o)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	plain := newD(Options{User: "ops"})
	flags := newD(Options{User: "ops", Port: 2022, Identities: []string{"~/id_cli"}, AcceptNew: true, ConnectTimeout: time.Second})

	tests := []struct {
		name       string
		d          *Dialer
		alias      string
		user       string
		port       int
		want       Target
		ignoreRest bool
	}{
		{name: "config host", d: plain, alias: "web1", want: Target{
			Alias: "web1", HostName: "10.0.0.5", Port: 2200, User: "alice",
			IdentityFiles: []string{filepath.Join(ssh, "web_key"), filepath.Join(ssh, "10.0.0.5_alice")},
			KnownHosts:    defKH, StrictHostKeyChecking: "yes", ConnectTimeout: 7 * time.Second,
		}},
		{name: "host list wins", d: plain, alias: "web1", user: "carol", port: 2201, want: Target{
			Alias: "web1", HostName: "10.0.0.5", Port: 2201, User: "carol",
			IdentityFiles: []string{filepath.Join(ssh, "web_key"), filepath.Join(ssh, "10.0.0.5_carol")},
			KnownHosts:    defKH, StrictHostKeyChecking: "yes", ConnectTimeout: 7 * time.Second,
		}},
		{name: "flags over config", d: flags, alias: "web1", want: Target{
			Alias: "web1", HostName: "10.0.0.5", Port: 2022, User: "alice",
			IdentityFiles: []string{filepath.Join(home, "id_cli"), filepath.Join(ssh, "web_key"), filepath.Join(ssh, "10.0.0.5_alice")},
			KnownHosts:    defKH, StrictHostKeyChecking: "accept-new", ConnectTimeout: time.Second,
		}},
		{name: "wildcard", d: plain, alias: "n1.cluster", want: Target{
			Alias: "n1.cluster", HostName: "n1.cluster", Port: 22, User: "bob", ProxyJump: "bastion",
			KnownHosts:            []string{filepath.Join(ssh, "kh_cluster"), "/etc/ssh/kh_global"},
			StrictHostKeyChecking: "yes", ConnectTimeout: 7 * time.Second,
		}},
		{name: "negated pattern", d: plain, alias: "n9.cluster", want: Target{
			Alias: "n9.cluster", HostName: "n9.cluster", Port: 22, User: "ops",
			KnownHosts: defKH, StrictHostKeyChecking: "yes", ConnectTimeout: 7 * time.Second,
		}},
		{name: "jump host", d: plain, alias: "bastion", want: Target{
			Alias: "bastion", HostName: "192.0.2.1", Port: 22, User: "jump",
			KnownHosts: defKH, StrictHostKeyChecking: "yes", ConnectTimeout: 7 * time.Second,
		}},
		{name: "ipv6 hostname", d: plain, alias: "v6", want: Target{
			Alias: "v6", HostName: "::1", Port: 2222, User: "ops",
			KnownHosts: defKH, StrictHostKeyChecking: "yes", ConnectTimeout: 7 * time.Second,
		}},
		{name: "ipv6 literal alias", d: plain, alias: "[fe80::1]", want: Target{
			Alias: "fe80::1", HostName: "fe80::1", Port: 22, User: "ops",
			KnownHosts: defKH, StrictHostKeyChecking: "yes", ConnectTimeout: 7 * time.Second,
		}},
		{name: "chain", d: plain, alias: "chain", want: Target{
			Alias: "chain", HostName: "10.1.1.1", Port: 22, User: "ops", ProxyJump: "admin@j1:2022,ssh://j2",
			KnownHosts: defKH, StrictHostKeyChecking: "yes", ConnectTimeout: 7 * time.Second,
		}},
		{name: "identities only", d: plain, alias: "keyonly", want: Target{
			Alias: "keyonly", HostName: "keyonly", Port: 22, User: "ops",
			IdentityFiles: []string{filepath.Join(ssh, "only key")}, IdentitiesOnly: true, HostKeyAlias: "kalias",
			KnownHosts: defKH, StrictHostKeyChecking: "accept-new", ConnectTimeout: 3 * time.Second,
		}},
		{name: "strict no", d: plain, alias: "lax", want: Target{
			Alias: "lax", HostName: "lax", Port: 22, User: "ops",
			KnownHosts: []string{"/dev/null"}, StrictHostKeyChecking: "no", ConnectTimeout: 7 * time.Second,
		}},
		{name: "hostname token", d: plain, alias: "gpu3", want: Target{
			Alias: "gpu3", HostName: "gpu3.example.net", Port: 22, User: "ops",
			KnownHosts: defKH, StrictHostKeyChecking: "yes", ConnectTimeout: 7 * time.Second,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.d.Resolve(tc.alias, tc.user, tc.port)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Resolve(%q, %q, %d)\n got %+v\nwant %+v", tc.alias, tc.user, tc.port, got, tc.want)
			}
		})
	}
}

func TestResolveDefaults(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	// No config file at all: ~/.ssh/config is missing, which is fine.
	d, err := NewDialer(Options{Home: home, AgentSocket: "/x/agent.sock"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.Resolve("node7", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Port != 22 || got.User == "" || got.HostName != "node7" || got.ConnectTimeout != 10*time.Second ||
		got.IdentityAgent != "/x/agent.sock" || got.StrictHostKeyChecking != "yes" {
		t.Errorf("defaults: %+v", got)
	}
	if _, err := NewDialer(Options{Home: home, ConfigFile: filepath.Join(home, "nope")}); err == nil {
		t.Error("an explicit missing config file should be an error")
	}
}

func TestParseJump(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []jumpHop
	}{
		{"bastion", []jumpHop{{host: "bastion"}}},
		{"admin@j1:2022,ssh://j2", []jumpHop{{host: "j1", user: "admin", port: 2022}, {host: "j2"}}},
		{"ssh://u@[::1]:2200", []jumpHop{{host: "::1", user: "u", port: 2200}}},
		{"fe80::2", []jumpHop{{host: "fe80::2"}}},
		{"u@10.0.0.1", []jumpHop{{host: "10.0.0.1", user: "u"}}},
	}
	for _, tc := range tests {
		got, err := parseJump(tc.in)
		if err != nil {
			t.Errorf("parseJump(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseJump(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{"", "a,,b", "h:99999", "u@"} {
		if _, err := parseJump(bad); err == nil {
			t.Errorf("parseJump(%q): no error", bad)
		}
	}
}

func TestHostErrorFormat(t *testing.T) {
	t.Parallel()
	e := &HostError{Host: "h3", Kind: HostKeyUnknown, Err: errorString("key SHA256:x"), Hint: "to accept it: ..."}
	if got, want := e.Error(), "h3: host key unknown: key SHA256:x; to accept it: ..."; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !strings.Contains((&HostError{Host: "h", Kind: Throttled}).Error(), "throttled") {
		t.Error("kind missing")
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
