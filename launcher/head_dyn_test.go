package launcher

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gorun/gorun/launcher/control"
)

// The head's part in dynamic processes, fed synthetic requests with no
// process anywhere (as TestGenerationHandlers): the job runs ranks 0, 1
// on h0 and 2, 3 on h1, two slots each.

// dynFrames decodes what the head sent an agent: its Launch frames and
// its answers to requests.
func dynFrames(t *testing.T, r *agentRecorder) (launches []control.Launch, replies []control.DynReply, asked []control.Dyn) {
	t.Helper()
	r.mu.Lock()
	rd := control.NewReader(bytes.NewReader(bytes.Clone(r.buf.Bytes())))
	r.mu.Unlock()
	for {
		f, err := rd.Next()
		if err != nil {
			return
		}
		switch f.Type {
		case control.TypeLaunch:
			var l control.Launch
			if err := f.Decode(&l); err != nil {
				t.Fatal(err)
			}
			launches = append(launches, l)
		case control.TypeDynRe:
			var d control.DynReply
			if err := f.Decode(&d); err != nil {
				t.Fatal(err)
			}
			replies = append(replies, d)
		case control.TypeDyn:
			var d control.Dyn
			if err := f.Decode(&d); err != nil {
				t.Fatal(err)
			}
			asked = append(asked, d)
		}
	}
}

// evDyn is an agent's request: from rank of the generation's namespace
// (or of ns when given).
func evDyn(node int, id uint64, d control.Dyn) event {
	d.ID = id
	if d.From.Nspace == "" {
		d.From.Nspace = pmixNspace("test", 0, 0)
	}
	return dynRequested{fromAgent{node}, d}
}

func lastReply(t *testing.T, r *agentRecorder) control.DynReply {
	t.Helper()
	_, replies, _ := dynFrames(t, r)
	if len(replies) == 0 {
		t.Fatal("no answer")
	}
	return replies[len(replies)-1]
}

// A spawn is placed on the job's hosts (here all four slots are taken:
// oversubscribed, the least loaded first), launched on them as a job of
// its own namespace and numbers, and answered once its ranks started;
// its ranks' failures are named with it, and each agent's Done counts
// its Launch frames.
func TestDynSpawn(t *testing.T) {
	t.Parallel()
	g := newTestGen(t, Options{Plan: PlanOptions{Oversubscribe: true}})
	g.feed(evStarted(0, 0, 1), evStarted(1, 2, 3))
	spawn := control.Dyn{Kind: control.DynSpawn, From: control.Proc{Rank: 1},
		Apps: []control.DynApp{{Argv: []string{"./child", "x"}, Size: 3, Env: []string{"OMPI_PARENT_PORT=p"}}}}
	g.feed(evDyn(0, 7, spawn))
	var l0, l1 control.Launch
	for node, want := range []int{2, 1} { // ranks of the spawned job on h0, h1
		ls, _, _ := dynFrames(t, g.rec[node])
		if len(ls) != 2 || ls[1].Spawned == nil {
			t.Fatalf("h%d: launches %+v, want the generation's and the spawned job's", node, ls)
		}
		l := ls[1]
		if len(l.Ranks) != want || l.WorldSize != 3 || l.Spawned.Base != 4 || l.Spawned.Nspace != "gorun.test.0.1" || l.PMI.KVSName != "kvs_test_0_1" ||
			l.Spawned.SlotsUsed != 2 || !l.Bind.Oversubscribed || l.Apps[0].Exports[0] != "OMPI_PARENT_PORT=p" {
			t.Errorf("h%d: spawned launch %+v %+v", node, l, l.Spawned)
		}
		if node == 0 {
			l0 = l
		} else {
			l1 = l
		}
	}
	if got := [3]int{l0.Spawned.NodeOf[0], l0.Spawned.NodeOf[1], l0.Spawned.NodeOf[2]}; got != [3]int{0, 1, 0} {
		t.Errorf("placement %v, want [0 1 0] (round the hosts once they are full)", got)
	}
	if l1.Ranks[0].Rank != 1 || l1.Ranks[0].LocalRank != 0 {
		t.Errorf("h1's spawned rank %+v, want rank 1, local rank 0", l1.Ranks[0])
	}
	if _, replies, _ := dynFrames(t, g.rec[0]); len(replies) != 0 {
		t.Fatalf("answered before the ranks started: %+v", replies)
	}
	g.feed(evStarted(0, 4, 6), evStarted(1, 5))
	if r := lastReply(t, g.rec[0]); r.ID != 7 || r.Status != control.DynOK || r.Nspace != "gorun.test.0.1" {
		t.Errorf("answer %+v, want the new namespace", r)
	}
	// h1's Done for its first launch alone is not its last.
	g.feed(evExited(1, 2, 0), evExited(1, 3, 0), agentDone{fromAgent{1}, control.Done{Launches: 1}})
	if g.pending != 2 {
		t.Errorf("pending %d after a Done that counts one launch of two, want 2", g.pending)
	}
	g.feed(evExited(1, 5, 3))
	if g.res.reason != reasonFailed || g.res.first.Job != 1 || g.res.first.Rank != 1 {
		t.Fatalf("result %+v, want spawned job 1's rank 1 the first failure", g.res)
	}
	_, text := g.h.summary(g.res)
	if want := "rank 1 of spawned job 1 (gorun.test.0.1) on h1 (pid 105) exited with code 3"; !strings.Contains(text, want) {
		t.Errorf("summary %q lacks %q", text, want)
	}
	g.feed(agentDone{fromAgent{1}, control.Done{Launches: 2}})
	if g.pending != 1 {
		t.Errorf("pending %d, want 1", g.pending)
	}
}

// What gorun cannot serve is refused at once, with the reason, which
// gorun prints too: an info key it does not serve, a host outside the
// job, more ranks than free slots when the job may not oversubscribe.
func TestDynSpawnRefused(t *testing.T) {
	t.Parallel()
	app := func(info ...control.KV) []control.DynApp {
		return []control.DynApp{{Argv: []string{"./child"}, Size: 1, Info: info}}
	}
	tests := []struct {
		name string
		o    Options
		d    control.Dyn
		want string
	}{
		{"info key", Options{Plan: PlanOptions{Oversubscribe: true}}, control.Dyn{Apps: app(control.KV{Key: "pmix.ppr", Value: "1:node"})},
			"gorun does not serve the info key pmix.ppr=1:node"},
		{"job info key", Options{Plan: PlanOptions{Oversubscribe: true}}, control.Dyn{Apps: app(), Info: []control.KV{{Key: "pmix.mapby", Value: "ppr:2:socket"}}},
			"it maps spawned ranks by slot (its default) or by node"},
		{"host", Options{Plan: PlanOptions{Oversubscribe: true}}, control.Dyn{Apps: app(control.KV{Key: "pmix.host", Value: "h9"})},
			"names h9, where the job runs no agent"},
		{"slots", Options{}, control.Dyn{Apps: app()}, "1 process do not fit: their hosts have 4 slots, 4 of them in use"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newTestGen(t, tt.o)
			tt.d.Kind = control.DynSpawn
			g.feed(evDyn(1, 3, tt.d))
			r := lastReply(t, g.rec[1])
			if r.Status == control.DynOK || !strings.Contains(r.Err, tt.want) || !strings.Contains(g.notes.String(), tt.want) {
				t.Errorf("answer %+v, notes %q; want a refusal saying %q", r, g.notes.String(), tt.want)
			}
			if ls, _, _ := dynFrames(t, g.rec[0]); len(ls) != 1 {
				t.Errorf("a refused spawn launched something: %d launches", len(ls))
			}
		})
	}
	// host= names one of the job's hosts: the ranks go there alone.
	g := newTestGen(t, Options{Plan: PlanOptions{Oversubscribe: true}})
	g.feed(evDyn(0, 1, control.Dyn{Kind: control.DynSpawn, Apps: app(control.KV{Key: "host", Value: "h1"}), Info: []control.KV{{Key: "pmix.mapby", Value: "node"}}}))
	ls, _, _ := dynFrames(t, g.rec[1])
	if len(ls) != 2 || len(ls[1].Ranks) != 1 || ls[1].Spawned.NodeOf[0] != 1 {
		t.Errorf("host=h1: launches %+v", ls)
	}
}

// Names are published job-wide, once each; a lookup finds them, waits
// for them when asked to, and only the publisher unpublishes.
func TestDynNames(t *testing.T) {
	t.Parallel()
	g := newTestGen(t, Options{})
	pub := control.Dyn{Kind: control.DynPublish, From: control.Proc{Rank: 0}, Info: []control.KV{{Key: "pmix.range", Value: "1"}, {Key: "svc", Value: "port-0"}}}
	g.feed(evDyn(0, 1, pub))
	if r := lastReply(t, g.rec[0]); r.Status != control.DynOK {
		t.Fatalf("publish: %+v", r)
	}
	g.feed(evDyn(1, 2, control.Dyn{Kind: control.DynLookup, From: control.Proc{Rank: 3}, Keys: []string{"svc"}}))
	if r := lastReply(t, g.rec[1]); r.Status != control.DynOK || len(r.Found) != 1 || r.Found[0].Value != "port-0" || r.Found[0].Publisher.Rank != 0 {
		t.Errorf("lookup: %+v", r)
	}
	g.feed(evDyn(1, 3, control.Dyn{Kind: control.DynPublish, From: control.Proc{Rank: 2}, Info: []control.KV{{Key: "svc", Value: "port-2"}}}))
	if r := lastReply(t, g.rec[1]); r.Status != control.DynExists || !strings.Contains(r.Err, "already published (by rank 0)") {
		t.Errorf("second publish: %+v", r)
	}
	g.feed(evDyn(1, 4, control.Dyn{Kind: control.DynLookup, From: control.Proc{Rank: 3}, Keys: []string{"later"}}))
	if r := lastReply(t, g.rec[1]); r.Status != control.DynNotFound {
		t.Errorf("lookup of a name not published: %+v", r)
	}
	g.feed(evDyn(1, 5, control.Dyn{Kind: control.DynLookup, From: control.Proc{Rank: 3}, Keys: []string{"later"}, Info: []control.KV{{Key: "pmix.wait", Value: "true"}}}))
	if r := lastReply(t, g.rec[1]); r.ID != 4 {
		t.Fatalf("a waiting lookup was answered at once: %+v", r)
	}
	g.feed(evDyn(0, 6, control.Dyn{Kind: control.DynPublish, From: control.Proc{Rank: 1}, Info: []control.KV{{Key: "later", Value: "\x02beef"}}}))
	if r := lastReply(t, g.rec[1]); r.ID != 5 || len(r.Found) != 1 || r.Found[0].Value != "\x02beef" {
		t.Errorf("the waiting lookup: %+v", r)
	}
	g.feed(evDyn(1, 7, control.Dyn{Kind: control.DynUnpublish, From: control.Proc{Rank: 2}, Keys: []string{"svc"}}))
	if r := lastReply(t, g.rec[1]); r.Status == control.DynOK {
		t.Errorf("rank 2 unpublished rank 0's name: %+v", r)
	}
	g.feed(evDyn(0, 8, control.Dyn{Kind: control.DynUnpublish, From: control.Proc{Rank: 0}, Keys: []string{"svc"}}))
	if r := lastReply(t, g.rec[0]); r.Status != control.DynOK {
		t.Errorf("unpublish: %+v", r)
	}
	g.feed(evDyn(1, 9, control.Dyn{Kind: control.DynPublish, From: control.Proc{Rank: 2}, Info: []control.KV{{Key: "odd", Value: "\x01PMIX_DATA_ARRAY"}}}))
	if r := lastReply(t, g.rec[1]); r.Status != control.DynNotSupported || !strings.Contains(r.Err, "of type PMIX_DATA_ARRAY") {
		t.Errorf("publish of an array: %+v", r)
	}
}

// A connect completes when every host that runs its processes came; a
// direct modex is asked of the host that runs the rank.
func TestDynConnectAndModex(t *testing.T) {
	t.Parallel()
	g := newTestGen(t, Options{})
	ns := pmixNspace("test", 0, 0)
	c := control.Dyn{Kind: control.DynConnect, From: control.Proc{Nspace: ns, Rank: -1}, Procs: []control.Proc{{Nspace: ns, Rank: 3}, {Nspace: ns, Rank: 0}}}
	g.feed(evDyn(0, 1, c))
	if _, replies, _ := dynFrames(t, g.rec[0]); len(replies) != 0 {
		t.Fatalf("connect answered before h1 came: %+v", replies)
	}
	g.feed(evDyn(1, 2, c))
	if a, b := lastReply(t, g.rec[0]), lastReply(t, g.rec[1]); a.ID != 1 || b.ID != 2 || a.Status != 0 || b.Status != 0 {
		t.Errorf("connect answers %+v %+v", a, b)
	}
	g.feed(evDyn(0, 3, control.Dyn{Kind: control.DynModex, Procs: []control.Proc{{Nspace: ns, Rank: 2}}}))
	_, _, asked := dynFrames(t, g.rec[1])
	if len(asked) != 1 || asked[0].Kind != control.DynModex || asked[0].Procs[0].Rank != 2 {
		t.Fatalf("h1 was asked %+v, want rank 2's data", asked)
	}
	g.feed(dynAnswered{fromAgent{1}, control.DynReply{ID: asked[0].ID, Kind: control.DynModex, Data: []byte("blob")}})
	if r := lastReply(t, g.rec[0]); r.ID != 3 || string(r.Data) != "blob" {
		t.Errorf("modex answer %+v", r)
	}
	g.feed(evDyn(0, 4, control.Dyn{Kind: control.DynConnect, Procs: []control.Proc{{Nspace: "gorun.other.0", Rank: -1}}}))
	if r := lastReply(t, g.rec[0]); r.Status != control.DynNotFound || !strings.Contains(r.Err, "no namespace gorun.other.0") {
		t.Errorf("connect to an unknown namespace: %+v", r)
	}
}

// A fence over ranks of several namespaces (Open MPI's
// MPI_Comm_disconnect) completes when each of their hosts came, with
// every host's data in node order, whatever the order they came in.
func TestDynFence(t *testing.T) {
	t.Parallel()
	g := newTestGen(t, Options{})
	ns := pmixNspace("test", 0, 0)
	f := control.Dyn{Kind: control.DynFence, Procs: []control.Proc{{Nspace: ns, Rank: 0}, {Nspace: ns, Rank: 2}}}
	f.Data = []byte("h1;")
	g.feed(evDyn(1, 1, f))
	f.Data = []byte("h0;")
	g.feed(evDyn(0, 2, f))
	for node, id := range []uint64{2, 1} {
		if r := lastReply(t, g.rec[node]); r.ID != id || string(r.Data) != "h0;h1;" {
			t.Errorf("h%d: %+v, want h0's data then h1's", node, r)
		}
	}
}

// The bindings a spawned job's ranks get are reported as theirs, without
// the slots taken before them.
func TestSpawnedReport(t *testing.T) {
	t.Parallel()
	in := "node1: 2 packages\nnode1 rank -1: CPUs 0\n  why: bind to core\nnode1 rank -2: CPUs 1\n  why: bind to core\nnode1 rank 0: CPUs 2\n  why: bind to core\n"
	want := "node1: 2 packages\nnode1 spawned job 3 rank 0: CPUs 2\n  why: bind to core\n"
	if got := spawnedReport(in, "node1", 3); got != want {
		t.Errorf("spawnedReport:\n%s\nwant\n%s", got, want)
	}
}

// A spawned job whose ranks all ended without publishing their port (a
// program that never calls MPI_Init) fails its spawner's wait for it, at
// once or when it ends, rather than leave it waiting.
func TestDynSpawnNeverConnects(t *testing.T) {
	t.Parallel()
	for _, lookupFirst := range []bool{false, true} {
		g := newTestGen(t, Options{Plan: PlanOptions{Oversubscribe: true}})
		g.feed(evDyn(0, 1, control.Dyn{Kind: control.DynSpawn, Apps: []control.DynApp{{Argv: []string{"/bin/true"}, Size: 1, Env: []string{"OMPI_PARENT_PORT=42.0:7"}}}}))
		g.feed(evStarted(0, 4))
		lookup := evDyn(0, 2, control.Dyn{Kind: control.DynLookup, Keys: []string{"42.0:7:connect"}, Info: []control.KV{{Key: "pmix.wait", Value: "true"}}})
		if lookupFirst {
			g.feed(lookup, evExited(0, 4, 0))
		} else {
			g.feed(evExited(0, 4, 0), lookup)
		}
		if r := lastReply(t, g.rec[0]); r.ID != 2 || r.Status != control.DynNotFound || !strings.Contains(r.Err, "spawned job 1 (gorun.test.0.1) ended before it connected to rank 0") {
			t.Errorf("lookup first %v: answer %+v", lookupFirst, r)
		}
		if g.res.reason != reasonSuccess {
			t.Errorf("lookup first %v: a spawned rank's exit 0 ended the job: %+v", lookupFirst, g.res)
		}
	}
}
