// Package sshclient is how gorun reaches other hosts over SSH: it resolves a
// host of gorun's host list through the user's OpenSSH client configuration
// (~/.ssh/config or --ssh-config), authenticates the way ssh(1) does (-i
// identities, IdentityFile, the ssh-agent, the default ~/.ssh/id_* keys),
// verifies host keys against known_hosts files (refusing unknown keys unless
// asked to record them, and changed keys always), follows ProxyJump chains,
// bounds the number of handshakes in flight and retries the ones that sshd's
// MaxStartups throttling cuts.
//
// Every failure to reach a host is a *HostError, which names the host, says
// what kind of failure it was (Kind) and, where there is one, how to fix it.
//
// Stage makes sure that a gorun binary identical to the local one exists on
// the remote host, copying it over the SSH connection into a per-user cache
// (~/.cache/gorun/bin/<hash>/gorun) when the wanted path does not hold it.
//
// A Dialer is safe for concurrent use: the launcher dials many hosts at once.
package sshclient
