package topology

import (
	"encoding/json"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string
		len  int
		err  bool
	}{
		{"", "", 0, false},
		{"\n", "", 0, false},
		{"0", "0", 1, false},
		{"0-3,8,10-11\n", "0-3,8,10-11", 7, false},
		{"8,0-3,2", "0-3,8", 5, false},
		{"0-55,112-167", "0-55,112-167", 112, false},
		{"0-7:2", "0,2,4,6", 4, false},
		{"63-65", "63-65", 3, false},
		{"3-1", "", 0, true},
		{"a", "", 0, true},
		{"1,,2", "", 0, true},
		{"-1", "", 0, true},
		{"0-", "", 0, true},
		{"1:2", "", 0, true},
		{"0-3:0", "", 0, true},
		{"65536", "", 0, true},
		{"+1", "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			s, err := ParseCPUList(tt.in)
			if (err != nil) != tt.err {
				t.Fatalf("ParseCPUList(%q) error = %v, want error %v", tt.in, err, tt.err)
			}
			if err != nil {
				return
			}
			if got := s.String(); got != tt.want {
				t.Errorf("ParseCPUList(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if s.Len() != tt.len {
				t.Errorf("ParseCPUList(%q).Len() = %d, want %d", tt.in, s.Len(), tt.len)
			}
		})
	}
}

func TestCPUSetOps(t *testing.T) {
	t.Parallel()
	a := NewCPUSet(0, 1, 2, 70)
	b := NewCPUSet(2, 3)
	if got := a.Union(b).String(); got != "0-3,70" {
		t.Errorf("Union = %q", got)
	}
	if got := a.Intersect(b).String(); got != "2" {
		t.Errorf("Intersect = %q", got)
	}
	if !a.Contains(70) || a.Contains(3) || a.Contains(-1) || a.Contains(1000) {
		t.Errorf("Contains wrong on %v", a)
	}
	if !NewCPUSet(1).Equal(NewCPUSet(1).Union(CPUSet{})) || NewCPUSet(1).Equal(NewCPUSet(65)) {
		t.Errorf("Equal wrong")
	}
	if !(CPUSet{}).IsEmpty() || a.IsEmpty() {
		t.Errorf("IsEmpty wrong")
	}
	j, err := json.Marshal(struct{ S CPUSet }{a})
	if err != nil || string(j) != `{"S":"0-2,70"}` {
		t.Fatalf("Marshal = %s, %v", j, err)
	}
	var back struct{ S CPUSet }
	if err := json.Unmarshal(j, &back); err != nil || !back.S.Equal(a) {
		t.Fatalf("Unmarshal = %v, %v", back.S, err)
	}
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"", "0", "0-3,8,10-11", "0-7:2", "3-1", "1,,2", "0-55,112-167\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseCPUList(in)
		if err != nil {
			return
		}
		// Formatting is canonical: it parses back to the same set and
		// formats again to the same text.
		out := s.String()
		s2, err := ParseCPUList(out)
		if err != nil {
			t.Fatalf("ParseCPUList(%q) = %q, which does not parse: %v", in, out, err)
		}
		if !s2.Equal(s) || s2.String() != out {
			t.Fatalf("round trip of %q: %q then %q", in, out, s2.String())
		}
		if s.Len() != len(s.CPUs()) {
			t.Fatalf("Len %d != len(CPUs) %d", s.Len(), len(s.CPUs()))
		}
	})
}
