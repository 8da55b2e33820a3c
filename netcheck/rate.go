package netcheck

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseRate parses a link rate in Gbit/s: a number followed by a unit,
// case-insensitive: "100Gbit", "25Gb", "10G", "10Gbps", "800Mbit",
// "800M", "1.5Tbit". A bare number is Gbit/s. Rates are bits, not bytes:
// "GB" is refused as ambiguous, rather than read as bits.
func ParseRate(s string) (float64, error) {
	in := strings.TrimSpace(s)
	i := 0
	for i < len(in) && (in[i] == '.' || '0' <= in[i] && in[i] <= '9') {
		i++
	}
	v, err := strconv.ParseFloat(in[:i], 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("netcheck: rate %q: want a positive number of bits per second, such as 100Gbit, 25Gb or 800Mbit", s)
	}
	unit := strings.TrimSpace(in[i:])
	if strings.HasSuffix(unit, "B") || strings.HasSuffix(unit, "Bps") || strings.HasSuffix(unit, "B/s") {
		return 0, fmt.Errorf("netcheck: rate %q: bytes? write bits, such as 100Gbit or 25Gb", s)
	}
	unit = strings.ToLower(unit)
	for _, suffix := range []string{"bit/s", "bits/s", "bps", "bits", "bit", "b"} {
		if u, ok := strings.CutSuffix(unit, suffix); ok {
			unit = u
			break
		}
	}
	switch unit {
	case "k":
		return v / 1e6, nil
	case "m":
		return v / 1e3, nil
	case "", "g":
		return v, nil
	case "t":
		return v * 1e3, nil
	}
	return 0, fmt.Errorf("netcheck: rate %q: unknown unit; want Kbit, Mbit, Gbit or Tbit", s)
}
