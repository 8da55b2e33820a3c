package transport

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind is a kind of transport that a pair of ranks talks over.
type Kind int

// The kinds of transport, in the order the rendezvous records list them.
const (
	// KindTCP is package tcp's transport: across hosts, or wherever a job
	// asks for it.
	KindTCP Kind = iota
	// KindSHM is package shm's transport: between the ranks of one host.
	KindSHM
	// KindPlugin is a plugin's transport (NVLink, InfiniBand, ...).
	KindPlugin
)

var kindNames = [...]string{KindTCP: "tcp", KindSHM: "shm", KindPlugin: "plugin"}

// String returns the kind's name: "tcp", "shm" or "plugin".
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Mode is a job's choice of transports (gorun --transport,
// GORUN_COLL_TRANSPORT): the input of the rule [Mode.Pick] applies to every
// pair of ranks.
type Mode int

// The modes. The zero Mode is ModeAuto.
const (
	// ModeAuto uses shared memory between the ranks of one host and, across
	// hosts, the plugin's transport where both ranks have it, TCP
	// otherwise.
	ModeAuto Mode = iota
	// ModeTCP uses TCP between every pair.
	ModeTCP
	// ModeSHM uses shared memory between every pair: a job on one host.
	ModeSHM
	// ModePlugin uses the plugin's transport between every pair where both
	// ranks have it, TCP otherwise.
	ModePlugin
)

var modeNames = [...]string{ModeAuto: "auto", ModeTCP: "tcp", ModeSHM: "shm", ModePlugin: "plugin"}

// ParseMode returns the Mode that a transport setting names: "" or
// "auto", "tcp", "shm", or "plugin" (gorun bench --transport,
// GORUN_COLL_TRANSPORT). Its error quotes the value and says what would
// do; the caller names the setting it came from.
func ParseMode(name string) (Mode, error) {
	if name == "" {
		return ModeAuto, nil
	}
	for m, n := range modeNames {
		if n == name {
			return Mode(m), nil
		}
	}
	last := len(modeNames) - 1
	return ModeAuto, fmt.Errorf("%q: want %s or %s", name, strings.Join(modeNames[:last], ", "), modeNames[last])
}

// String returns the mode's name: "auto", "tcp", "shm" or "plugin".
func (m Mode) String() string {
	if m >= 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Pair describes two ranks for [Mode.Pick].
type Pair struct {
	// SameHost reports whether both ranks run on one host.
	SameHost bool
	// Plugin reports whether both ranks listen on a plugin transport.
	Plugin bool
}

// Pick returns the kind of transport that the pair p talks over in mode m.
// Both ranks of a pair pick alike, each from what both published, so that
// one's Connect meets the other's Listener. A pair that wants the plugin's
// transport but lacks it on one end gets KindTCP: whether that fallback is
// allowed is the caller's decision.
func (m Mode) Pick(p Pair) Kind {
	switch {
	case m == ModeTCP:
		return KindTCP
	case m == ModeSHM:
		return KindSHM
	case m == ModePlugin && p.Plugin:
		return KindPlugin
	case m == ModePlugin:
		return KindTCP
	case p.SameHost:
		return KindSHM
	case p.Plugin:
		return KindPlugin
	}
	return KindTCP
}

// Uses reports whether Pick may return k for some pair of ranks of a world
// spread over hosts hosts (0 when unknown) in mode m: a rank listens on the
// kinds it may need before it knows its peers.
func (m Mode) Uses(k Kind, hosts int) bool {
	switch k {
	case KindTCP:
		return m == ModeTCP || m == ModePlugin || (m == ModeAuto && hosts != 1)
	case KindSHM:
		return m == ModeAuto || m == ModeSHM
	case KindPlugin:
		return m == ModePlugin || (m == ModeAuto && hosts != 1)
	}
	return false
}
