package hostfile

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// checkHosts reports hosts that break the invariants every parser promises.
func checkHosts(t *testing.T, hosts []Host) {
	t.Helper()
	if len(hosts) == 0 || len(hosts) > maxHosts {
		t.Fatalf("%d hosts without an error", len(hosts))
	}
	seen := make(map[string]bool)
	total := 0
	for _, h := range hosts {
		if err := checkName(h.Name); err != nil {
			t.Fatalf("host %#v: %v", h, err)
		}
		if strings.ContainsAny(h.Name, "[]@, \t\n#=") {
			t.Fatalf("host name %q has a separator", h.Name)
		}
		if seen[h.Name] {
			t.Fatalf("host %q returned twice", h.Name)
		}
		seen[h.Name] = true
		if h.Slots < 1 || h.Slots > maxCount {
			t.Fatalf("host %#v: bad Slots", h)
		}
		if h.MaxSlots != 0 && h.MaxSlots < h.Slots {
			t.Fatalf("host %#v: MaxSlots below Slots", h)
		}
		if h.Port < 0 || h.Port > maxPort {
			t.Fatalf("host %#v: bad Port", h)
		}
		if h.User != "" {
			if err := checkUser(h.User); err != nil {
				t.Fatalf("host %#v: %v", h, err)
			}
		}
		if h.GPUs != nil {
			t.Fatalf("host %#v: parser set GPUs", h)
		}
		total += h.Slots
	}
	if Total(hosts) != total {
		t.Fatalf("Total = %d, want %d", Total(hosts), total)
	}
}

// checkRoundTrip checks that hosts written with Host.String, one per line,
// parse back to the same hosts.
func checkRoundTrip(t *testing.T, hosts []Host) {
	t.Helper()
	var b strings.Builder
	for _, h := range hosts {
		b.WriteString(h.String())
		b.WriteByte('\n')
	}
	back, err := Parse(strings.NewReader(b.String()), "roundtrip")
	if err != nil {
		t.Fatalf("reading back %q: %v", b.String(), err)
	}
	if !reflect.DeepEqual(back, hosts) {
		t.Fatalf("round trip through\n%s\ngave %#v\nwant %#v", b.String(), back, hosts)
	}
}

// checkSyntaxError checks that a parser's error wraps ErrSyntax and names
// the input.
func checkSyntaxError(t *testing.T, err error, prefix string) {
	t.Helper()
	if !errors.Is(err, ErrSyntax) {
		t.Fatalf("error %v does not wrap ErrSyntax", err)
	}
	if !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("error %q does not start with %q", err, prefix)
	}
}

func addFileSeeds(f *testing.F, pattern string) {
	files, err := filepath.Glob(pattern)
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data))
	}
}

func FuzzParse(f *testing.F) {
	addFileSeeds(f, "testdata/*.hosts")
	addFileSeeds(f, "testdata/bad/*.hosts")
	addFileSeeds(f, "testdata/pbs/*")
	for _, s := range []string{
		"", "a", "a:1\na:2", "a slots=1 max_slots=1\na slots=1 max_slots=2",
		"u@[::1]:3 port=1 max_slots=9 # c", "[::ffff:1.2.3.4]", "a\x00b", "a\r\rb",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		hosts, err := Parse(strings.NewReader(data), "fuzz")
		if err != nil {
			checkSyntaxError(t, err, "hostfile fuzz")
			var le *LineError
			if !errors.As(err, &le) || le.File != "fuzz" {
				t.Fatalf("error %#v is not a LineError for the source", err)
			}
			return
		}
		checkHosts(t, hosts)
		checkRoundTrip(t, hosts)
	})
}

func FuzzParseHostList(f *testing.F) {
	for _, s := range []string{
		"a:2,b:2,alice@c", "node[01-04]:2", "node[1,3]:2,x", "bob@r[1-2]n[1-2]",
		"[::1]:2,alice@[fe80::1%eth0]", "a,a:2", "a,,b", "n[1:2]", "a,alice@a",
		"n[0-999999999]", "a[2-1]", "x:0", "10.0.0.[1-4]:8", "n[9-11]:1,n10",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ParseHostList(s)
		if err != nil {
			checkSyntaxError(t, err, "-H")
			var le *LineError
			if !errors.As(err, &le) || le.File != "-H" {
				t.Fatalf("error %#v is not a -H LineError", err)
			}
			return
		}
		checkHosts(t, hosts)
		checkRoundTrip(t, hosts)
		// Written back as a -H list, without ranges, the hosts read the same.
		items := make([]string, len(hosts))
		for i, h := range hosts {
			if h.Port != 0 || h.MaxSlots != 0 {
				t.Fatalf("host %#v: -H set Port or MaxSlots", h)
			}
			name := h.Name
			if strings.Contains(name, ":") {
				name = "[" + name + "]"
			}
			if h.User != "" {
				name = h.User + "@" + name
			}
			items[i] = name + ":" + strconv.Itoa(h.Slots)
		}
		back, err := ParseHostList(strings.Join(items, ","))
		if err != nil || !reflect.DeepEqual(back, hosts) {
			t.Fatalf("-H round trip: got %v, %v; want %v", back, err, hosts)
		}
	})
}

func FuzzExpandNodelist(f *testing.F) {
	for _, s := range []string{
		"node[01-04,07],gpu-[1-2]", "n[08-11]", "r[1-2]n[1-2]", "a,a,b", "n[098-101]",
		"n[", "n]", "n[3-1]", "n[0-999999999]", "n[1-1000]x[1-1000]", "[1-2]", "-a",
		"rack[1-2]-node[3,5]-ib", "n[1-[2]]", "n[]", "n[1,,2]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		names, err := ExpandNodelist(s)
		if err != nil {
			checkSyntaxError(t, err, "hostfile: nodelist "+strconv.Quote(s))
			return
		}
		if len(names) == 0 || len(names) > maxExpand {
			t.Fatalf("%d names without an error", len(names))
		}
		for _, n := range names {
			if strings.ContainsAny(n, "[],") {
				t.Fatalf("name %q has a bracket or comma", n)
			}
			if err := checkName(n); err != nil {
				t.Fatalf("name %q: %v", n, err)
			}
		}
		// Items without brackets expand to themselves, one name each.
		if !strings.Contains(s, "[") && len(names) != strings.Count(s, ",")+1 {
			t.Fatalf("%q: %d names", s, len(names))
		}
		if len(names) <= 10000 {
			back, err := ExpandNodelist(strings.Join(names, ","))
			if err != nil || !slices.Equal(back, names) {
				t.Fatalf("expanding the expansion: got %v, %v", back, err)
			}
		}
	})
}

func FuzzParseTasksPerNode(f *testing.F) {
	for _, s := range []string{
		"2(x3),1", "4(x2)", "4,3,1", "1", "", "0", "2(x", "2(3)", "1(x1000001)",
		"1(x999999),1,1", "1(x2),3,2(x2)", "007(x01)",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		counts, err := ParseTasksPerNode(s)
		if err != nil {
			checkSyntaxError(t, err, "hostfile: tasks per node "+strconv.Quote(s))
			return
		}
		if len(counts) == 0 || len(counts) > maxExpand {
			t.Fatalf("%d counts without an error", len(counts))
		}
		// Compressed the way Slurm writes it, the counts read the same.
		var items []string
		for i := 0; i < len(counts); {
			j := i
			for j < len(counts) && counts[j] == counts[i] {
				j++
			}
			if counts[i] < 1 || counts[i] > maxCount {
				t.Fatalf("count %d out of range", counts[i])
			}
			item := strconv.Itoa(counts[i])
			if j-i > 1 {
				item += "(x" + strconv.Itoa(j-i) + ")"
			}
			items = append(items, item)
			i = j
		}
		back, err := ParseTasksPerNode(strings.Join(items, ","))
		if err != nil || !slices.Equal(back, counts) {
			t.Fatalf("compressed round trip: got %v, %v", back, err)
		}
	})
}

func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{
		"w0", "w0@w1:0,2", "w1:3,1", "[::1]:0@10.0.0.1", "", "w0@", "w0@w0",
		"w1:1,1", "w1:", "w1:x", "w 1", "w1:99999999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		filter, err := ParseFilter(s)
		if err != nil {
			checkSyntaxError(t, err, "hostfile: filter "+strconv.Quote(s))
			return
		}
		back, err := ParseFilter(filter.String())
		if err != nil || !reflect.DeepEqual(back, filter) {
			t.Fatalf("String round trip through %q: got %#v, %v; want %#v", filter.String(), back, err, filter)
		}
		// Give each named host exactly the slots it needs, plus one, and
		// check what Include and Exclude leave.
		var hosts []Host
		want := 0 // slots Include keeps
		seen := make(map[string]bool)
		for _, fh := range filter.Hosts {
			if err := checkName(fh.Name); err != nil {
				t.Fatalf("filter host %q: %v", fh.Name, err)
			}
			if seen[fh.Name] {
				t.Fatalf("filter host %q twice", fh.Name)
			}
			seen[fh.Name] = true
			slots := 1
			if fh.Slots != nil {
				slots = slices.Max(fh.Slots) + 2
				want += len(fh.Slots)
			} else {
				want += slots
			}
			hosts = append(hosts, Host{Name: fh.Name, Slots: slots})
		}
		hosts = append(hosts, Host{Name: "other.host", Slots: 3})
		if seen["other.host"] {
			return
		}
		in, err := Include(hosts, filter)
		if err != nil {
			t.Fatalf("Include: %v", err)
		}
		if Total(in) != want {
			t.Fatalf("Include kept %d slots, want %d", Total(in), want)
		}
		out, err := Exclude(hosts, filter)
		if err != nil {
			t.Fatalf("Exclude: %v", err)
		}
		if Total(out) != Total(hosts)-want {
			t.Fatalf("Exclude kept %d slots, want %d", Total(out), Total(hosts)-want)
		}
		for _, h := range append(in, out...) {
			if h.Slots < 1 || h.GPUs != nil && len(h.GPUs) != h.Slots {
				t.Fatalf("filtered host %#v inconsistent", h)
			}
		}
	})
}
