package collectives

import (
	"testing"
)

// FuzzThresholds: Set never panics, leaves the table unchanged on error,
// and a table it accepts prints as text that parses back to itself.
func FuzzThresholds(f *testing.F) {
	f.Add(DefaultThresholds().String())
	f.Add("allreduce@inter=recursive-doubling<=8KiB,rabenseifner<=512KiB,ring")
	f.Add("alltoall=bruck<=256B&n>=9&n<=64&pow2,linear;hierarchical=off")
	f.Add("bcast=binomial<=1K;;# comment\nreduce@intra=chain")
	f.Add("allreduce=ring<=99999999999G")
	f.Fuzz(func(t *testing.T, spec string) {
		d := DefaultThresholds()
		before := d.String()
		if err := d.Set(spec); err != nil {
			if d.String() != before {
				t.Fatalf("failed Set(%q) changed the table", spec)
			}
			return
		}
		var u Thresholds
		if err := u.Set(d.String()); err != nil {
			t.Fatalf("printed table does not parse: %v\n%s", err, d)
		}
		if u.String() != d.String() {
			t.Fatalf("round trip of %q:\n%s\nvs\n%s", spec, u.String(), d.String())
		}
		for c := range numCollectives {
			for l := range numLinkClasses {
				for _, n := range []int{1, 2, 3, 8, 100} {
					if a := d.Select(c, l, n, 4096); !c.runs(a) {
						t.Fatalf("%s selects %s", c, a)
					}
				}
			}
		}
	})
}

// FuzzWire: the header and control decoders never panic on any bytes, and
// what they accept encodes back to the same bytes.
func FuzzWire(f *testing.F) {
	b := make([]byte, hdrLen)
	(&header{class: classData, kind: CollAllReduce, dtype: BF16, op: Avg, count: 7, seq: 3, step: 1}).put(b)
	f.Add(b)
	f.Add(ctrlMsg{typ: ctrlAbort, code: codeMismatch, subject: 2, seq: 9, detail: "it called broadcast"}.encode())
	f.Add([]byte{hdrMagic, classCtrl})
	f.Fuzz(func(t *testing.T, in []byte) {
		if h, ok := parseHeader(in); ok {
			out := make([]byte, hdrLen)
			h.put(out)
			// Bytes 7 and 28..31 are reserved: put writes zeros there.
			want := append([]byte(nil), in[:hdrLen]...)
			want[7] = 0
			copy(want[28:], []byte{0, 0, 0, 0})
			if string(out) != string(want) {
				t.Fatalf("header round trip: %x -> %x", in[:hdrLen], out)
			}
			_ = h.call()
			_ = h.mismatch(header{})
		}
		if m, ok := decodeCtrl(in); ok {
			if len(in) <= EagerBytes && string(m.encode()) != string(in) {
				t.Fatalf("control round trip: %x", in)
			}
			_ = sentinelOf(m.code)
		}
	})
}
