package main

import (
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

// buildCollectivesExample builds examples/collectives, a Go rank that
// checks every collective over gorun's transports.
func buildCollectivesExample(t *testing.T, dir string) string {
	return buildExample(t, dir, "collectives")
}

func checkCollectivesPassed(t *testing.T, r result, n int, over string, hosts int) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for rank := range n {
		if w := fmt.Sprintf("rank %d of %d: collectives PASS over %s on %d hosts\n", rank, n, over, hosts); !strings.Contains(r.stdout, w) {
			t.Errorf("stdout lacks %q:\n%s%s", w, r.stdout, r.stderr)
		}
	}
}

// Go ranks started by gorun join a communicator with collectives.Init and
// run every collective, over shared memory and over TCP (loopback).
func TestCollectivesExample(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "four jobs of the collectives example")
	bin := buildCollectivesExample(t, t.TempDir())
	checkCollectivesPassed(t, runGorun(t, 90*time.Second, nil, "-np", "4", bin), 4, "shm", 1)
	checkCollectivesPassed(t, runGorun(t, 90*time.Second, nil, "-np", "3",
		"-x", "GORUN_COLL_TRANSPORT=tcp", "-x", "GORUN_COLL_IFACE==lo", bin), 3, "tcp", 1)
	checkCollectivesPassed(t, runGorun(t, 90*time.Second, nil, "-np", "1", bin), 1, "self", 1)
	// Large messages read from the sender's memory (process_vm_readv).
	checkCollectivesPassed(t, runGorun(t, 90*time.Second, nil, "-np", "3", "-x", "GORUN_COLL_CMA=1", bin), 3, "shm", 1)
}

// checkPeerKilled checks a `die` run: every surviving rank's collective
// failed with an error that names the killed rank, gorun's summary names
// it, and nothing survives.
func checkPeerKilled(t *testing.T, r result, n, victim int, mark string) {
	t.Helper()
	if r.code == 0 {
		t.Fatalf("exit 0 with rank %d killed\n%s", victim, r.stderr)
	}
	for rank := range n {
		if rank == victim {
			continue
		}
		// A rank that finished the victim's last AllReduce without it
		// (across hosts, the hierarchical algorithm's ranks on the other
		// host need no data of the victim's once its host's first phase
		// is done) hears of the failure in its next call, which then
		// fails as the communicator's earlier failure, naming the victim.
		w := fmt.Sprintf("rank %d: error names rank %d: collectives: allreduce: (communicator broken by an earlier failure: collectives: allreduce: )?rank %d: peer gone", rank, victim, victim)
		if !regexp.MustCompile(w).MatchString(r.stderr) {
			t.Errorf("stderr does not match %q", w)
		}
	}
	if w := fmt.Sprintf("failed: rank %d on ", victim); !strings.Contains(r.stderr, w) {
		t.Errorf("the summary does not name rank %d first (%q)", victim, w)
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", r.stderr)
	}
	assertNoSurvivors(t, mark, 2*time.Second)
}

// A rank killed in the middle of an AllReduce: the others' AllReduce
// fails, naming it, well before gorun's grace period would kill them.
func TestCollectivesPeerKilled(t *testing.T) {
	t.Parallel()
	bin := buildCollectivesExample(t, t.TempDir())
	mark := newMark(t)
	r := runGorun(t, 90*time.Second, nil, "-np", "4", "--grace-period", "30s", "-x", "GORUN_TEST_MARK="+mark, bin, "die", "2")
	checkPeerKilled(t, r, 4, 2, mark)
	if r.elapsed > 20*time.Second {
		t.Errorf("the survivors took %v to see the failure", r.elapsed)
	}
}

// benchRow matches a row of the table: size, count, type, redop, time,
// algbw, busbw, #wrong, algorithm.
var benchRow = regexp.MustCompile(`(?m)^ +(\d+) +(\d+) +(\w+) +(\w+) +([\d.]+) +([\d.]+) +([\d.]+) +(\S+) +(\S+)$`)

// TestBench runs `gorun bench` for every collective, and checks the
// table, the CSV, the JSON and the SVG it writes.
func TestBench(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	csvFile, jsonFile, svgFile := filepath.Join(dir, "r.csv"), filepath.Join(dir, "r.json"), filepath.Join(dir, "r.svg")
	r := runGorun(t, 120*time.Second, nil, "bench", "allreduce", "-np", "2", "-b", "8", "-e", "1M", "-f", "8",
		"--iters", "3", "-w", "1", "--csv", csvFile, "--json", jsonFile, "--svg", svgFile)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, w := range []string{"# Collective           : allreduce", "# Ranks                : 2", "# Transport            : shm",
		"#       size         count      type   redop      time   algbw   busbw  #wrong  algorithm", "# Out of bounds values : 0"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("stdout lacks %q", w)
		}
	}
	rows := benchRow.FindAllStringSubmatch(r.stdout, -1)
	var sizes []string
	for _, row := range rows {
		sizes = append(sizes, row[1])
		if row[3] != "float32" || row[4] != "sum" || row[8] != "0" {
			t.Errorf("row %q", row[0])
		}
	}
	if got := strings.Join(sizes, ","); got != "8,64,512,4096,32768,262144" {
		t.Errorf("sizes %s\n%s", got, r.stdout)
	}
	f, err := os.Open(csvFile)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || len(recs) != 7 || recs[0][0] != "collective" || recs[6][4] != "262144" {
		t.Errorf("CSV: %v %q", err, recs)
	}
	var doc struct {
		Header  map[string]any   `json:"header"`
		Results []map[string]any `json:"results"`
	}
	b, err := os.ReadFile(jsonFile)
	if err != nil || json.Unmarshal(b, &doc) != nil || len(doc.Results) != 6 || doc.Header["transport"] != "shm" {
		t.Errorf("JSON: %v\n%s", err, b)
	}
	b, err = os.ReadFile(svgFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(strings.NewReader(string(b)))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("SVG: %v", err)
		}
	}
	if !strings.Contains(string(b), "<polyline") {
		t.Errorf("SVG without a line:\n%s", b)
	}

	// Every collective, type-checked on 3 ranks (not a power of two).
	for _, coll := range []string{"broadcast", "reduce", "allgather", "reducescatter", "alltoall", "sendrecv", "barrier"} {
		r := runGorun(t, 120*time.Second, nil, "bench", coll, "-np", "3", "-b", "12", "-e", "200K", "-f", "16", "--iters", "2",
			"-d", "int32", "-o", "max", "-r", "1")
		if n := len(benchRow.FindAllStringSubmatch(r.stdout, -1)); r.code != 0 || (coll != "barrier" && n != 4) || (coll == "barrier" && n != 1) {
			t.Errorf("%s: exit %d, %d rows\n%s%s", coll, r.code, n, r.stdout, r.stderr)
		}
	}
	// --csv - replaces the table.
	r = runGorun(t, 60*time.Second, nil, "bench", "--csv", "-", "-np", "2", "-b", "1K", "-e", "1K", "-d", "bfloat16", "-o", "avg", "allreduce")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "collective,op,dtype") || !strings.Contains(r.stdout, "allreduce,avg,bfloat16,2,1024,512,") {
		t.Errorf("--csv -: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Bad input to gorun bench: usage errors (exit 2) that name the input.
func TestBenchUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "allsum", "-np", "1"}, `collective "allsum": want one of allreduce`},
		{[]string{"bench", "allreduce", "-np", "1", "-b", "8Q"}, `-b: collbench: invalid size "8Q"`},
		{[]string{"bench", "allreduce", "-np", "1", "-d", "complex64"}, `data type "complex64"`},
		{[]string{"bench", "allreduce", "-np", "1", "-b", "1M", "-e", "1K"}, "maximum size 1024 is below minimum size 1048576"},
		{[]string{"bench", "-np", "1"}, "want one collective"},
		{[]string{"bench", "allreduce", "-np", "1", "--transport", "ib"}, `--transport "ib"`},
	} {
		r := runGorun(t, 30*time.Second, nil, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, want 2 and %q\n%s", tc.args, r.code, tc.want, r.stderr)
		}
	}
}

// Across SSH hosts (network namespaces): shared memory inside each host,
// TCP between them; a killed rank is named on every host; and gorun bench
// runs there.
func TestSSHCollectives(t *testing.T) {
	c := sharedCluster(t)
	bin := buildCollectivesExample(t, binDir)
	ssh := []string{"--ssh-config", c.SSHConfig}
	checkCollectivesPassed(t, runBin(t, gorunBin, 120*time.Second, append(ssh, "-H", "h1:2,h2:2", bin)...), 4, "shm+tcp", 2)
	checkCollectivesPassed(t, runBin(t, gorunBin, 120*time.Second, append(ssh, "-H", "h1:1,h2:1,h3:1", bin)...), 3, "tcp", 3)

	mark := newMark(t)
	r := runBin(t, gorunBin, 120*time.Second, append(ssh, "-H", "h1:2,h2:2", "--grace-period", "30s",
		"-x", "GORUN_TEST_MARK="+mark, bin, "die", "3")...)
	checkPeerKilled(t, r, 4, 3, mark)

	// The whole matrix: every collective x type x operator, element
	// counts 0, 1, 37, 1369 and 50653 (as the type's size allows), each
	// checked against a serial computation, on 3, 5 and 8 ranks.
	for _, hosts := range []string{"h1:1,h2:1,h3:1", "h1:2,h2:2,h3:1", "h1:2,h2:2,h3:2,h4:2"} {
		r := runBin(t, gorunBin, 300*time.Second, append(ssh, "bench", "all", "-H", hosts, "--all-types",
			"-b", "0", "-e", "512K", "-f", "37", "--iters", "1", "-w", "0", "--csv", "-")...)
		rows := strings.Count(r.stdout, "\n") - 1
		if r.code != 0 || rows != 666 {
			t.Errorf("%s: exit %d, %d rows, want 666\n%s", hosts, r.code, rows, r.stderr)
		}
	}

	r = runBin(t, gorunBin, 120*time.Second, append(ssh, "bench", "allreduce", "-H", "h1:2,h2:2", "-b", "4K", "-e", "4M", "-f", "32", "--iters", "3")...)
	if r.code != 0 || !strings.Contains(r.stdout, "# Transport            : shm+tcp") || !strings.Contains(r.stdout, "# Hosts                : 2") ||
		len(benchRow.FindAllStringSubmatch(r.stdout, -1)) != 3 || !strings.Contains(r.stdout, "# Out of bounds values : 0") {
		t.Errorf("bench over SSH: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestBenchArgs(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"gorun bench allreduce -np 4 -b 8", "gorun bench -np 4 -b 8 allreduce"},
		{"gorun --ssh-config f bench allreduce -H h1", "gorun bench --ssh-config f -H h1 allreduce"},
		{"gorun bench -np 2 alltoall", "gorun bench -np 2 alltoall"},
		{"gorun -np 2 ./bench allreduce", "gorun -np 2 ./bench allreduce"},
		{"gorun bench allsum -np 2", "gorun bench allsum -np 2"},
	} {
		if got := strings.Join(benchArgs(strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("benchArgs(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
