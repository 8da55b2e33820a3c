package netcheck

import (
	"cmp"
	"fmt"
	"time"
)

// EnvConfig carries a `gorun check --net` rank's Config, as JSON, from the
// head to every rank.
const EnvConfig = "GORUN_NETCHECK_CONFIG"

// RankCommand is the gorun-tools command of a `gorun check --net` rank,
// which gorun launches as the job's program (gorun-tools net-rank).
const RankCommand = "net-rank"

// The prefixes of the lines rank 0 writes on its standard output, each
// followed by JSON: the job's description (an [Info]), one measured
// direction of a host pair (a [Link]), one host's own report (package
// nodecheck's Report, kept as raw JSON here), and every host's report as
// text (a JSON string, formatted by package nodecheck on rank 0, so that
// gorun links neither it nor the plugin host it needs).
const (
	InfoPrefix     = "#gorun-net-info "
	LinkPrefix     = "#gorun-net-link "
	NodePrefix     = "#gorun-net-node "
	NodeTextPrefix = "#gorun-net-nodetext "
)

// The defaults of Config's zero fields.
const (
	DefaultDuration   = 25 * time.Millisecond
	DefaultRepeats    = 3
	DefaultChunkBytes = 256 << 10
	DefaultMaxBytes   = 4 << 30
	DefaultPings      = 10
	DefaultWindow     = 4
	DefaultNodeBudget = 5 * time.Second
	DefaultRetests    = 2
)

// Config is what a `gorun check --net` rank measures. The zero value
// measures with the defaults.
type Config struct {
	// Duration bounds each transfer of the bandwidth measurement of one
	// direction of a pair (0: DefaultDuration); the sender stops sending
	// after it, or after MaxBytes, whichever comes first.
	Duration time.Duration `json:",omitempty"`
	// Repeats is the number of transfers each way (0: DefaultRepeats), of
	// which the fastest counts: a link is as fast as it has shown it can
	// be, whatever else shared the hosts' CPUs for a moment.
	Repeats int `json:",omitempty"`
	// ChunkBytes is the size of each message of the bandwidth
	// measurement (0: DefaultChunkBytes).
	ChunkBytes int `json:",omitempty"`
	// MaxBytes caps the bytes sent one way (0: DefaultMaxBytes).
	MaxBytes int64 `json:",omitempty"`
	// Pings is the number of timed 8-byte round trips of the latency
	// measurement (0: DefaultPings), after a few untimed ones.
	Pings int `json:",omitempty"`
	// Window is the number of chunks in flight (0: DefaultWindow).
	Window int `json:",omitempty"`
	// Retests is how many times the pairs of the links that look slow
	// after a pass are measured again (0: DefaultRetests; negative:
	// none), each rate the fastest of all its measurements: a link
	// slowed for a moment by something else on its hosts is not
	// flagged, one that is slow stays slow.
	Retests int `json:",omitempty"`
	// Expect and Fraction are the head's --expect (Gbit/s) and
	// --slow-fraction, with which the ranks choose what to measure again.
	Expect   float64 `json:",omitempty"`
	Fraction float64 `json:",omitempty"`
	// NoNode skips each host's own report (package nodecheck).
	NoNode bool `json:",omitempty"`
	// NodeBudget bounds the GPU copies of each host's own report (0:
	// DefaultNodeBudget).
	NodeBudget time.Duration `json:",omitempty"`
}

// WithDefaults returns cfg with its zero fields set to the defaults.
func (cfg Config) WithDefaults() Config {
	cfg.Duration = cmp.Or(cfg.Duration, DefaultDuration)
	cfg.Repeats = cmp.Or(cfg.Repeats, DefaultRepeats)
	cfg.ChunkBytes = cmp.Or(cfg.ChunkBytes, DefaultChunkBytes)
	cfg.MaxBytes = cmp.Or(cfg.MaxBytes, DefaultMaxBytes)
	cfg.Pings = cmp.Or(cfg.Pings, DefaultPings)
	cfg.Window = cmp.Or(cfg.Window, DefaultWindow)
	cfg.Retests = cmp.Or(cfg.Retests, DefaultRetests)
	cfg.NodeBudget = cmp.Or(cfg.NodeBudget, DefaultNodeBudget)
	return cfg
}

// Validate refuses negative numbers and chunks too small for their
// header (16 bytes).
func (cfg Config) Validate() error {
	switch {
	case cfg.Duration < 0:
		return fmt.Errorf("netcheck: duration %v: must not be negative", cfg.Duration)
	case cfg.ChunkBytes != 0 && cfg.ChunkBytes < 16:
		return fmt.Errorf("netcheck: chunk of %d bytes: want at least 16", cfg.ChunkBytes)
	case cfg.MaxBytes < 0, cfg.Repeats < 0, cfg.Pings < 0, cfg.Window < 0, cfg.NodeBudget < 0:
		return fmt.Errorf("netcheck: max bytes %d, repeats %d, pings %d, window %d: must not be negative", cfg.MaxBytes, cfg.Repeats, cfg.Pings, cfg.Window)
	}
	return nil
}

// Info is rank 0's description of the job it measures, the first line it
// writes (InfoPrefix).
type Info struct {
	// Hosts are the hosts' names in rank order (GORUN_HOSTNAME).
	Hosts []string `json:"hosts"`
	// Transport is what the communicator uses between ranks.
	Transport string `json:"transport,omitempty"`
	// Rounds is the number of rounds of disjoint pairs.
	Rounds int `json:"rounds"`
}

// Link is one direction of a host pair: the bandwidth from From to To,
// and the pair's round-trip time (the same both ways).
type Link struct {
	From  string  `json:"from"`
	To    string  `json:"to"`
	Gbps  float64 `json:"gbps"`
	RTTus float64 `json:"rtt_us"`
}
