package testhosts

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// fileSpec is a file for writeFiles to write.
type fileSpec struct {
	path, data string
	mode       os.FileMode
}

// writeFiles writes the client files, the hosts files and each host's sshd
// config and network batch. The host keys must exist.
func (c *Cluster) writeFiles(o Options) error {
	var cfg, known, nodeHosts, cluster, hostfile strings.Builder
	names := make([]string, 0, 2*len(c.Hosts))
	cfg.WriteString("# gorun testhosts: use with ssh -F. Every host is addressed by IP; no name goes to DNS.\n")
	for _, h := range c.Hosts {
		fmt.Fprintf(&cfg, "Host %s %s\n  HostName %s\n", h.Name, h.IP, h.IP)
		names = append(names, h.Name, h.IP)
	}
	fmt.Fprintf(&cfg, `Host %s
  User root
  Port 22
  IdentityFile %s
  IdentitiesOnly yes
  UserKnownHostsFile %s
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  CheckHostIP no
  BatchMode yes
  PasswordAuthentication no
  ConnectTimeout 5
  LogLevel ERROR
`, strings.Join(names, " "), c.Key, c.KnownHosts)
	if o.KexAlgorithms != "" {
		fmt.Fprintf(&cfg, "  KexAlgorithms %s\n", o.KexAlgorithms)
	}

	self, _ := os.Hostname()
	nodeHosts.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	if self != "" && self != "head" && self != "localhost" {
		fmt.Fprintf(&nodeHosts, "%s\thead %s\n", c.HeadIP, self)
	} else {
		fmt.Fprintf(&nodeHosts, "%s\thead\n", c.HeadIP)
	}
	for i, h := range c.Hosts {
		pub, err := os.ReadFile(filepath.Join(c.hostDir(i+1), "ssh_host_ed25519_key.pub"))
		if err != nil {
			return fmt.Errorf("testhosts: %w", err)
		}
		f := strings.Fields(string(pub))
		if len(f) < 2 {
			return fmt.Errorf("testhosts: bad host key for %s", h.Name)
		}
		fmt.Fprintf(&known, "%s,%s %s %s\n", h.Name, h.IP, f[0], f[1])
		fmt.Fprintf(&cluster, "%s\t%s\n", h.IP, h.Name)
		fmt.Fprintf(&hostfile, "%s slots=%d\n", h.Name, o.Slots)
	}
	nodeHosts.WriteString(cluster.String())

	realHosts, err := os.ReadFile("/etc/hosts")
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("testhosts: %w", err)
	}
	headHosts := string(realHosts)
	if headHosts != "" && !strings.HasSuffix(headHosts, "\n") {
		headHosts += "\n"
	}
	headHosts += "# gorun testhosts cluster\n" + cluster.String()

	pub, err := os.ReadFile(c.Key + ".pub")
	if err != nil {
		return fmt.Errorf("testhosts: %w", err)
	}
	files := []fileSpec{
		{c.SSHConfig, cfg.String(), 0o600},
		{c.KnownHosts, known.String(), 0o600},
		{c.NodeHosts, nodeHosts.String(), 0o644},
		{c.HeadHosts, headHosts, 0o644},
		{c.Hostfile, hostfile.String(), 0o644},
		{c.SSHWrapper, "#!/bin/sh\nexec ssh -F " + shellQuote(c.SSHConfig) + " \"$@\"\n", 0o755},
		{filepath.Join(c.Dir, "authorized_keys"), string(pub), 0o600},
		{filepath.Join(c.Dir, "node-rc"), "", 0o644},
	}
	for i, h := range c.Hosts {
		hd := c.hostDir(i + 1)
		files = append(files,
			fileSpec{filepath.Join(hd, "sshd_config"), sshdConfig(c, hd, h, o.MaxStartups), 0o600},
			fileSpec{filepath.Join(hd, "net.batch"), "link set lo up\naddr add " + h.IP + "/24 dev eth0\nlink set eth0 up\n", 0o600})
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, []byte(f.data), f.mode); err != nil {
			return fmt.Errorf("testhosts: %w", err)
		}
	}
	return nil
}

func sshdConfig(c *Cluster, hd string, h Host, maxStartups string) string {
	return fmt.Sprintf(`# gorun testhosts: sshd of %s (%s)
ListenAddress 0.0.0.0
Port 22
HostKey %s
PidFile %s
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowAgentForwarding yes
AllowTcpForwarding yes
MaxStartups %s
MaxSessions 200
LogLevel ERROR
Subsystem sftp internal-sftp
`, h.Name, h.IP, filepath.Join(hd, "ssh_host_ed25519_key"), filepath.Join(hd, "sshd.pid"),
		filepath.Join(c.Dir, "authorized_keys"), maxStartups)
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
