package netcheck

import "testing"

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
		bad  bool
	}{
		{in: "100Gbit", want: 100},
		{in: "25Gb", want: 25},
		{in: "10G", want: 10},
		{in: "10", want: 10},
		{in: "40gbps", want: 40},
		{in: "400 Gbit/s", want: 400},
		{in: "800Mbit", want: 0.8},
		{in: "800M", want: 0.8},
		{in: "1.6Tbit", want: 1600},
		{in: "500kbit", want: 0.0005},
		{in: "100GB", bad: true},
		{in: "12.5GBps", bad: true},
		{in: "fast", bad: true},
		{in: "0G", bad: true},
		{in: "-5G", bad: true},
		{in: "5Xbit", bad: true},
		{in: "", bad: true},
	} {
		got, err := ParseRate(c.in)
		switch {
		case c.bad && err == nil:
			t.Errorf("ParseRate(%q) = %v, want an error", c.in, got)
		case !c.bad && err != nil:
			t.Errorf("ParseRate(%q): %v", c.in, err)
		case !c.bad && (got < c.want*(1-1e-12) || got > c.want*(1+1e-12)):
			t.Errorf("ParseRate(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}
