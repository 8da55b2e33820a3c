// This file holds the head's part in dynamic processes, as mpirun has
// them: MPI_Comm_spawn and MPI_Comm_spawn_multiple (a spawned job of its
// own namespace, placed on the job's hosts' free slots, launched beside
// the generation's ranks, relayed, reaped and stopped as they are), the
// job-wide store of published names (MPI_Publish_name, MPI_Lookup_name),
// PMIx connects and disconnects across namespaces, and the direct modex
// that fetches a rank's PMIx data from another host. Each request comes
// from an agent (agent_dyn.go) as a control.Dyn, and is answered with one
// control.DynReply; what gorun cannot serve is refused at once, with a
// reason that the program gets and gorun prints.

package launcher

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/internal/plural"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/rendezvous"
)

// Events of dynamic processes.
type (
	// dynRequested: an agent carries a rank's request.
	dynRequested struct {
		fromAgent
		control.Dyn
	}
	// dynAnswered: an agent answers the head's question.
	dynAnswered struct {
		fromAgent
		control.DynReply
	}
	// dynExpired: a lookup's or a connect's wait is over.
	dynExpired struct {
		fromHead
		gen int
		key string
	}
)

// dynState is the head's part in one generation's dynamic processes.
type dynState struct {
	jobs     []*spawnedJob          // by number, from 1 (jobs[0] is the first spawned)
	next     int                    // the next spawned rank's number in the job's frames
	used     []int                  // ranks running per node: the generation's and the spawned jobs'
	names    map[string]pubName     // published names
	lookups  map[string]*lookupWait // lookups waiting for names, by key
	connects map[string]*connectOp  // connects, disconnects and fences in progress, by their processes
	modex    map[uint64]dynAsker    // the head's modex questions to agents, by ID
	nextID   uint64
}

// spawnedJob is one job that the generation's ranks spawned.
type spawnedJob struct {
	n          int    // its number: 1 for the first
	nspace     string // PMIx namespace
	kvs        string // PMI-1 KVS
	base, size int    // its ranks are base..base+size-1 in the job's frames
	apps       []control.App
	nodeOf     []int // by rank
	nodes      []int // distinctNodes(nodeOf): its fences' members
	store      *rendezvous.Store
	parent     control.Proc
	asker      dynAsker // the spawn's requester, answered once every rank started
	pmi        bool     // the spawn came over PMI-1
	starting   int      // ranks not yet started or failed to
	failed     string   // why a rank could not start
	ended      int      // ranks that ended
	published  bool     // one of its ranks published a name (Open MPI's children publish their port)
	port       string   // Open MPI's port of the spawn (OMPI_PARENT_PORT), which the spawner looks up with ":connect"
	recs       []RankRecord
}

// dynAsker is a request to answer: its agent's node and ID.
type dynAsker struct {
	node int
	id   uint64
	kind string
}

// pubName is a published name.
type pubName struct {
	value     string
	publisher control.Proc
}

// lookupWait is a lookup that waits for names to be published.
type lookupWait struct {
	asker dynAsker
	from  control.Proc // the rank that looks up
	keys  []string
	need  int // names to find before it is answered
}

// connectOp is a connect, disconnect or fence of a set of processes,
// which completes when every host that runs some of them has asked; a
// fence returns every host's data, in node order.
type connectOp struct {
	want    []int // the nodes
	arrived map[int]dynAsker
	data    map[int][]byte
}

func newDynState(h *head) *dynState {
	d := &dynState{next: len(h.plan.Ranks), used: make([]int, len(h.plan.Nodes)), names: map[string]pubName{},
		lookups: map[string]*lookupWait{}, connects: map[string]*connectOp{}, modex: map[uint64]dynAsker{}}
	for i, n := range h.plan.Nodes {
		d.used[i] = len(n.Ranks)
	}
	return d
}

// spawned is the spawned job whose ranks include id (a number in the job's
// frames), and id's rank in it; nil for the generation's ranks.
func (d *dynState) spawned(id int) (*spawnedJob, int) {
	if d == nil {
		return nil, 0
	}
	for _, j := range d.jobs {
		if id >= j.base && id < j.base+j.size {
			return j, id - j.base
		}
	}
	return nil, 0
}

// recOf is the record of the rank numbered id in the job's frames: the
// generation's, or a spawned job's; nil for a number no rank has.
func (g *genState) recOf(id int) *RankRecord {
	if id >= 0 && id < len(g.h.rec) {
		return &g.h.rec[id]
	}
	if j, r := g.dyn.spawned(id); j != nil {
		return &j.recs[r]
	}
	return nil
}

// reply answers a request.
func (g *genState) reply(to dynAsker, r control.DynReply) {
	if to.node < 0 || to.node >= len(g.h.agents) || g.h.agents[to.node].gone {
		return
	}
	r.ID, r.Kind = to.id, to.kind
	g.h.agents[to.node].w.Send(control.TypeDynRe, r)
}

// refuse answers a request with an error, which gorun prints too.
func (g *genState) refuse(to dynAsker, from string, status int, why string) {
	g.h.notef("gorun: %s: %s: %s\n", from, to.kind, why)
	g.reply(to, control.DynReply{Status: status, Err: why})
}

// who names a requester: "rank 0 (gorun.ab12.0)".
func (g *genState) who(p control.Proc) string {
	if j := g.jobNamed(p.Nspace); j != nil {
		return fmt.Sprintf("rank %d of spawned job %d (%s)", p.Rank, j.n, j.nspace)
	}
	if p.Rank < 0 {
		return p.Nspace
	}
	return fmt.Sprintf("rank %d", p.Rank)
}

// jobNamed is the spawned job of a namespace or KVS; nil for the
// generation's (or an unknown one).
func (g *genState) jobNamed(ns string) *spawnedJob {
	if g.dyn == nil {
		return nil
	}
	for _, j := range g.dyn.jobs {
		if j.nspace == ns || j.kvs == ns {
			return j
		}
	}
	return nil
}

// isGeneration reports whether ns names the generation's namespace or KVS.
func (g *genState) isGeneration(ns string) bool {
	return ns == pmixNspace(g.h.jobID, g.gen, 0) || ns == kvsName(g.h.jobID, g.gen)
}

// nodesOf are the nodes that run the processes p names (every rank of its
// namespace for rank -1), or why none.
func (g *genState) nodesOf(p control.Proc) ([]int, error) {
	var nodeOf []int
	switch j := g.jobNamed(p.Nspace); {
	case j != nil:
		nodeOf = j.nodeOf
	case g.isGeneration(p.Nspace):
		nodeOf = make([]int, len(g.h.plan.Ranks))
		for r, pl := range g.h.plan.Ranks {
			nodeOf[r] = pl.Node
		}
	default:
		return nil, fmt.Errorf("no namespace %s in this job", p.Nspace)
	}
	if p.Rank < 0 {
		return distinctNodes(nodeOf), nil
	}
	if p.Rank >= len(nodeOf) {
		return nil, fmt.Errorf("%s has no rank %d (it has %d)", p.Nspace, p.Rank, len(nodeOf))
	}
	return []int{nodeOf[p.Rank]}, nil
}

// onDyn answers a rank's request.
func (g *genState) onDyn(e dynRequested) {
	if g.dyn == nil {
		g.dyn = newDynState(g.h)
	}
	to := dynAsker{node: e.node, id: e.ID, kind: e.Kind}
	from := g.who(e.From)
	switch {
	case e.Generation != g.gen:
		g.reply(to, control.DynReply{Status: control.DynError, Err: fmt.Sprintf("generation %d has ended", e.Generation)})
		return
	case g.stopping && e.Kind == control.DynSpawn:
		g.reply(to, control.DynReply{Status: control.DynError, Err: "the job is stopping"})
		return
	}
	switch e.Kind {
	case control.DynSpawn:
		g.onSpawn(to, from, e.Dyn)
	case control.DynPublish:
		g.onPublish(to, from, e.Dyn)
	case control.DynLookup:
		g.onLookup(to, from, e.Dyn)
	case control.DynUnpublish:
		g.onUnpublish(to, from, e.Dyn)
	case control.DynConnect, control.DynDisconnect, control.DynFence:
		g.onConnect(to, from, e.Dyn)
	case control.DynModex:
		g.onModex(to, from, e.Dyn)
	default:
		g.refuse(to, from, control.DynNotSupported, fmt.Sprintf("gorun serves no %q request", e.Kind))
	}
}

// The attributes of a publish, lookup or unpublish that are directives,
// not names.
var nameDirectives = map[string]bool{"pmix.range": true, "pmix.persist": true, "pmix.timeout": true, "pmix.wait": true,
	"pmix.euid": true, "pmix.egid": true, "pmix.optional": true}

// onPublish publishes names, job-wide: a name is published once (a second
// publish of it fails, as MPI requires), until its publisher unpublishes
// it or the generation ends.
func (g *genState) onPublish(to dynAsker, from string, d control.Dyn) {
	var names []control.KV
	for _, kv := range d.Info {
		if nameDirectives[kv.Key] {
			continue
		}
		if t, ok := strings.CutPrefix(kv.Value, "\x01"); ok {
			g.refuse(to, from, control.DynNotSupported, fmt.Sprintf("gorun publishes names with string or byte values only; %s has a value of type %s", kv.Key, t))
			return
		}
		if p, ok := g.dyn.names[kv.Key]; ok {
			g.refuse(to, from, control.DynExists, fmt.Sprintf("the name %s is already published (by %s)", kv.Key, g.who(p.publisher)))
			return
		}
		names = append(names, kv)
	}
	for _, kv := range names {
		g.dyn.names[kv.Key] = pubName{value: kv.Value, publisher: d.From}
	}
	if j := g.jobNamed(d.From.Nspace); j != nil {
		j.published = true
	}
	g.reply(to, control.DynReply{})
	g.wakeLookups()
}

// onLookup answers a lookup with the names published, or waits for them
// (PMIX_WAIT) until PMIx_TIMEOUT or --rendezvous-timeout.
func (g *genState) onLookup(to dynAsker, from string, d control.Dyn) {
	w := &lookupWait{asker: to, from: d.From, keys: d.Keys}
	timeout := g.h.o.RendezvousTimeout
	if timeout <= 0 {
		timeout = rendezvous.DefaultFenceTimeout
	}
	for _, kv := range d.Info {
		switch kv.Key {
		case "pmix.wait":
			switch n, err := strconv.Atoi(kv.Value); {
			case kv.Value == "true":
				w.need = len(d.Keys)
			case err == nil && n > 0:
				w.need = min(n, len(d.Keys))
			case err == nil && n == 0:
				w.need = len(d.Keys)
			}
		case "pmix.timeout":
			if n, err := strconv.Atoi(kv.Value); err == nil && n > 0 {
				timeout = time.Duration(n) * time.Second
			}
		}
	}
	if g.answerLookup(w) {
		return
	}
	if j := g.unconnected(w); j != nil {
		g.failUnconnected(j, w)
		return
	}
	if w.need == 0 {
		g.reply(to, control.DynReply{Status: control.DynNotFound, Err: fmt.Sprintf("%s: not published", strings.Join(d.Keys, ", "))})
		return
	}
	key := fmt.Sprintf("lookup/%d/%d", to.node, to.id)
	g.dyn.lookups[key] = w
	g.expireAfter(key, timeout)
}

// answerLookup answers w if it found what it needs (at least one name
// when it does not wait), and reports whether it did.
func (g *genState) answerLookup(w *lookupWait) bool {
	var found []control.Found
	for _, k := range w.keys {
		if p, ok := g.dyn.names[k]; ok {
			found = append(found, control.Found{Key: k, Value: p.value, Publisher: p.publisher})
		}
	}
	if len(found) == 0 || len(found) < w.need {
		return false
	}
	g.reply(w.asker, control.DynReply{Found: found})
	return true
}

// wakeLookups answers the waiting lookups that a publish completed.
func (g *genState) wakeLookups() {
	for key, w := range g.dyn.lookups {
		if g.answerLookup(w) {
			delete(g.dyn.lookups, key)
		}
	}
}

// expireAfter ends the wait of key after d, on the loop.
func (g *genState) expireAfter(key string, d time.Duration) {
	h, gen := g.h, g.gen
	time.AfterFunc(d, func() {
		select {
		case h.events <- dynExpired{gen: gen, key: key}:
		case <-h.done:
		}
	})
}

// onDynExpired fails a lookup or a connect whose wait is over.
func (g *genState) onDynExpired(e dynExpired) {
	if e.gen != g.gen || g.dyn == nil {
		return
	}
	if w := g.dyn.lookups[e.key]; w != nil {
		delete(g.dyn.lookups, e.key)
		g.reply(w.asker, control.DynReply{Status: control.DynTimeout, Err: fmt.Sprintf("%s: not published in time", strings.Join(w.keys, ", "))})
	}
	if c := g.dyn.connects[e.key]; c != nil {
		delete(g.dyn.connects, e.key)
		var missing []string
		for _, n := range c.want {
			if _, ok := c.arrived[n]; !ok {
				missing = append(missing, g.h.plan.Nodes[n].Host.Name)
			}
		}
		why := fmt.Sprintf("timed out: the ranks on %s never joined it", strings.Join(missing, ", "))
		g.h.notef("gorun: a PMIx %s\n", why)
		for _, to := range c.arrived {
			g.reply(to, control.DynReply{Status: control.DynTimeout, Err: why})
		}
	}
}

// onUnpublish removes names that the requester published.
func (g *genState) onUnpublish(to dynAsker, from string, d control.Dyn) {
	for _, k := range d.Keys {
		p, ok := g.dyn.names[k]
		switch {
		case !ok:
			g.reply(to, control.DynReply{Status: control.DynNotFound, Err: fmt.Sprintf("%s: not published", k)})
			return
		case p.publisher != d.From && !(d.PMI && p.publisher.Nspace == d.From.Nspace):
			g.refuse(to, from, control.DynError, fmt.Sprintf("%s was published by %s, who alone may unpublish it", k, g.who(p.publisher)))
			return
		}
	}
	for _, k := range d.Keys {
		delete(g.dyn.names, k)
	}
	g.reply(to, control.DynReply{})
}

// onConnect counts a host into a connect, disconnect or fence of
// processes, and answers every host once all that run some of them have
// come (a fence with all their data).
func (g *genState) onConnect(to dynAsker, from string, d control.Dyn) {
	procs := slices.Clone(d.Procs)
	sort.Slice(procs, func(i, j int) bool {
		if procs[i].Nspace != procs[j].Nspace {
			return procs[i].Nspace < procs[j].Nspace
		}
		return procs[i].Rank < procs[j].Rank
	})
	var key strings.Builder
	key.WriteString(d.Kind)
	var want []int
	for _, p := range procs {
		fmt.Fprintf(&key, " %s:%d", p.Nspace, p.Rank)
		nodes, err := g.nodesOf(p)
		if err != nil {
			g.refuse(to, from, control.DynNotFound, err.Error())
			return
		}
		for _, n := range nodes {
			if !slices.Contains(want, n) {
				want = append(want, n)
			}
		}
	}
	c := g.dyn.connects[key.String()]
	if c == nil {
		c = &connectOp{want: want, arrived: map[int]dynAsker{}, data: map[int][]byte{}}
		g.dyn.connects[key.String()] = c
		timeout := g.h.o.RendezvousTimeout
		if timeout <= 0 {
			timeout = rendezvous.DefaultFenceTimeout
		}
		g.expireAfter(key.String(), timeout)
	}
	c.arrived[to.node], c.data[to.node] = to, d.Data
	for _, n := range c.want {
		if _, ok := c.arrived[n]; !ok {
			return
		}
	}
	delete(g.dyn.connects, key.String())
	var data []byte
	if d.Kind == control.DynFence {
		for _, n := range slices.Sorted(maps.Keys(c.data)) {
			data = append(data, c.data[n]...)
		}
	}
	for _, a := range c.arrived {
		g.reply(a, control.DynReply{Data: data})
	}
}

// onModex asks the agent of the host that runs a process for its PMIx
// data, for a rank on another host.
func (g *genState) onModex(to dynAsker, from string, d control.Dyn) {
	if len(d.Procs) != 1 || d.Procs[0].Rank < 0 {
		g.refuse(to, from, control.DynNotSupported, "a direct modex names one rank")
		return
	}
	nodes, err := g.nodesOf(d.Procs[0])
	if err != nil {
		g.reply(to, control.DynReply{Status: control.DynNotFound, Err: err.Error()})
		return
	}
	n := nodes[0]
	if n == to.node || g.h.agents[n].gone {
		g.reply(to, control.DynReply{Status: control.DynNotFound, Err: fmt.Sprintf("rank %d of %s has no data on %s",
			d.Procs[0].Rank, d.Procs[0].Nspace, g.h.plan.Nodes[n].Host.Name)})
		return
	}
	g.dyn.nextID++
	id := g.dyn.nextID
	g.dyn.modex[id] = to
	g.h.agents[n].w.Send(control.TypeDyn, control.Dyn{ID: id, Kind: control.DynModex, Generation: g.gen, Procs: d.Procs})
}

// onDynAnswer passes an agent's answer to a modex question on to the
// host that asked.
func (g *genState) onDynAnswer(e dynAnswered) {
	if g.dyn == nil {
		return
	}
	to, ok := g.dyn.modex[e.ID]
	if !ok {
		return
	}
	delete(g.dyn.modex, e.ID)
	r := e.DynReply
	g.reply(to, control.DynReply{Status: r.Status, Err: r.Err, Data: r.Data})
}

// The attributes of a spawn, and of its programs, that gorun serves: it
// honours these, ignores those that ask for nothing it would not do
// anyway, and refuses any other with its name.
var (
	spawnIgnored = map[string]string{
		"pmix.pers":        "personality",
		"pmix.notecomp":    "notify completion",
		"pmix.evar.hvstd":  "environment harvested",
		"pmix.nonpmi":      "non-MPI job",
		"pmix.spawned":     "spawned",
		"pmix.parent":      "parent",
		"pmix.dispmap":     "display map",
		"pmix.fwd.stdout":  "forward stdout",
		"pmix.fwd.stderr":  "forward stderr",
		"pmix.fwd.stddiag": "forward diagnostics",
		"pmix.prefix":      "prefix",
		"pmix.timeout":     "timeout",
		"soft":             "soft",
		"path":             "path",
	}
	// spawnRefused names what an attribute gorun refuses asks for.
	spawnRefused = map[string]string{
		"pmix.addhost":         "hosts beyond the job's",
		"pmix.addhostfile":     "hosts beyond the job's",
		"pmix.rankby":          "a ranking policy",
		"pmix.bindto":          "a binding policy (gorun binds spawned ranks as the job's)",
		"pmix.ppr":             "a processes-per-resource layout",
		"pmix.mapper":          "a mapper",
		"pmix.preloadbin":      "preloading the binary",
		"pmix.preloadfiles":    "preloading files",
		"pmix.fwd.stdin":       "forwarding stdin to the spawned ranks",
		"pmix.spwn.tool":       "spawning a tool",
		"pmix.debug.stop.init": "stopping the ranks for a debugger",
		"add-host":             "hosts beyond the job's",
		"add-hostfile":         "hosts beyond the job's",
		"arch":                 "an architecture",
		"file":                 "a file of per-process information",
	}
)

// spawnRequest is a spawn's programs as gorun will run them.
type spawnRequest struct {
	apps   []control.App
	hosts  [][]int // per app: the nodes it may run on (the job's, or those its host/hostfile names)
	size   int
	byNode bool // map_by node: one rank per node in turn, rather than filling each node's slots
}

// readSpawn checks a spawn's attributes and makes its programs, or says
// why gorun cannot serve it.
func (g *genState) readSpawn(d control.Dyn) (spawnRequest, error) {
	h := g.h
	var sr spawnRequest
	if len(d.Apps) == 0 {
		return sr, fmt.Errorf("a spawn of no program")
	}
	all := make([]int, len(h.plan.Nodes))
	for i := range all {
		all[i] = i
	}
	check := func(kv control.KV) error {
		if _, ok := spawnIgnored[kv.Key]; ok {
			return nil
		}
		if what, ok := spawnRefused[kv.Key]; ok {
			return fmt.Errorf("gorun does not serve the info key %s=%s: it asks for %s", kv.Key, kv.Value, what)
		}
		return fmt.Errorf("gorun does not serve the info key %s=%s (it serves host, hostfile, wdir and map_by slot or node)", kv.Key, kv.Value)
	}
	mapBy := func(kv control.KV) error {
		switch v, _, _ := strings.Cut(strings.ToLower(kv.Value), ":"); v {
		case "slot", "core":
			sr.byNode = false
		case "node":
			sr.byNode = true
		default:
			return fmt.Errorf("gorun does not serve the info key %s=%s: it maps spawned ranks by slot (its default) or by node", kv.Key, kv.Value)
		}
		return nil
	}
	for _, kv := range d.Info {
		var err error
		if kv.Key == "pmix.mapby" || kv.Key == "map_by" {
			err = mapBy(kv)
		} else {
			err = check(kv)
		}
		if err != nil {
			return sr, err
		}
	}
	for k, da := range d.Apps {
		if da.Size < 1 {
			return sr, fmt.Errorf("program %d (%s) asks for %d processes", k+1, argv0(da.Argv), da.Size)
		}
		app := control.App{Argv: da.Argv, Dir: da.Dir, Exports: da.Env, First: sr.size, Size: da.Size}
		nodes := all
		for _, kv := range da.Info {
			var err error
			switch kv.Key {
			case "pmix.wdir", "wdir":
				app.Dir = kv.Value
			case "pmix.host", "host":
				nodes, err = g.spawnHosts(kv.Value, "host")
			case "pmix.hostfile", "hostfile":
				nodes, err = g.spawnHostfile(kv.Value)
			case "pmix.mapby", "map_by":
				err = mapBy(kv)
			default:
				err = check(kv)
			}
			if err != nil {
				return sr, fmt.Errorf("program %d (%s): %w", k+1, argv0(da.Argv), err)
			}
		}
		if app.Dir == "" {
			app.Dir = h.dir()
		}
		if d.PMI {
			app.Exports = append(app.Exports, "PMI_SPAWNED=1")
		}
		if len(app.Argv) == 0 || app.Argv[0] == "" {
			return sr, fmt.Errorf("program %d has no command", k+1)
		}
		sr.apps = append(sr.apps, app)
		sr.hosts = append(sr.hosts, nodes)
		sr.size += da.Size
	}
	return sr, nil
}

func argv0(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	return argv[0]
}

// spawnHosts are the job's nodes that a host list (-H syntax) names.
func (g *genState) spawnHosts(list, key string) ([]int, error) {
	hosts, err := hostfile.ParseHostList(list)
	if err != nil {
		return nil, fmt.Errorf("the info key %s=%s: %w", key, list, err)
	}
	return g.jobNodes(hosts, key+"="+list)
}

// spawnHostfile are the job's nodes that a hostfile names.
func (g *genState) spawnHostfile(path string) ([]int, error) {
	hosts, err := hostfile.ParseFile(path)
	if err != nil {
		return nil, fmt.Errorf("the info key hostfile=%s: %w", path, err)
	}
	return g.jobNodes(hosts, "hostfile="+path)
}

// jobNodes are the job's nodes that hosts names; a host the job does not
// run on is refused (gorun spawns on the job's hosts only).
func (g *genState) jobNodes(hosts []hostfile.Host, what string) ([]int, error) {
	var out []int
	for _, want := range hosts {
		found := -1
		for i, n := range g.h.plan.Nodes {
			if n.Host.Name == want.Name || IsLocal(n.Host.Name) && IsLocal(want.Name) {
				found = i
				break
			}
		}
		if found < 0 {
			var names []string
			for _, n := range g.h.plan.Nodes {
				names = append(names, n.Host.Name)
			}
			return nil, fmt.Errorf("%s names %s, where the job runs no agent (gorun spawns on the job's hosts: %s)", what, want.Name, strings.Join(names, ", "))
		}
		if !slices.Contains(out, found) {
			out = append(out, found)
		}
	}
	return out, nil
}

// place puts a spawn's ranks on free slots of their programs' nodes,
// filling each node in turn as mpirun's default does (map_by node: one
// rank on each node with a free slot in turn); with no free slot left,
// oversubscribing when the job may (else it says why not).
func (g *genState) place(sr spawnRequest) ([]int, error) {
	h, used := g.h, slices.Clone(g.dyn.used)
	var nodeOf []int
	for k, app := range sr.apps {
		next := 0 // map_by node: the node after the last one used
		for range app.Size {
			best := -1
			for i := range sr.hosts[k] {
				n := sr.hosts[k][i]
				if sr.byNode {
					n = sr.hosts[k][(next+i)%len(sr.hosts[k])]
				}
				if used[n] < h.plan.Nodes[n].Host.Slots {
					best = n
					next = (next + i + 1) % len(sr.hosts[k])
					break
				}
			}
			if best < 0 {
				if !h.o.Plan.Oversubscribe {
					slots, inUse := 0, 0
					for _, n := range sr.hosts[k] {
						slots, inUse = slots+h.plan.Nodes[n].Host.Slots, inUse+g.dyn.used[n]
					}
					return nil, fmt.Errorf("%s do not fit: their hosts have %s, %d of them in use (as mpirun, gorun spawns on free slots only; give --oversubscribe to allow more)%s",
						processes(sr.size), plural.Of(slots, "slot"), min(inUse, slots), g.idleHosts())
				}
				best = sr.hosts[k][0]
				for _, n := range sr.hosts[k] {
					if used[n]-h.plan.Nodes[n].Host.Slots < used[best]-h.plan.Nodes[best].Host.Slots {
						best = n
					}
				}
			}
			used[best]++
			nodeOf = append(nodeOf, best)
		}
	}
	return nodeOf, nil
}

// onSpawn starts a spawned job: a namespace of its own, its ranks placed
// on the job's free slots and launched by their hosts' agents. The
// requester is answered once every rank started (or one could not).
func (g *genState) onSpawn(to dynAsker, from string, d control.Dyn) {
	h := g.h
	sr, err := g.readSpawn(d)
	if err != nil {
		g.refuse(to, from, control.DynNotSupported, "MPI_Comm_spawn: "+err.Error())
		return
	}
	nodeOf, err := g.place(sr)
	if err != nil {
		g.refuse(to, from, control.DynError, "MPI_Comm_spawn: "+err.Error())
		return
	}
	n := len(g.dyn.jobs) + 1
	j := &spawnedJob{n: n, nspace: pmixNspace(h.jobID, g.gen, n), kvs: kvsName(h.jobID, g.gen) + "_" + strconv.Itoa(n),
		base: g.dyn.next, size: sr.size, apps: sr.apps, nodeOf: nodeOf, nodes: distinctNodes(nodeOf), parent: d.From,
		asker: to, pmi: d.PMI, starting: sr.size}
	j.store, err = rendezvous.NewStore(len(j.nodes), rendezvous.StoreOptions{FenceTimeout: storeFenceTimeout(h.o.RendezvousTimeout),
		Budget: rendezvous.Budget{Keys: h.o.KVJobBudget.Keys, Bytes: h.o.KVJobBudget.Bytes, Setting: JobBudgetSetting}})
	if err != nil {
		g.refuse(to, from, control.DynError, "MPI_Comm_spawn: "+err.Error())
		return
	}
	j.recs = make([]RankRecord, sr.size)
	for r := range j.recs {
		j.recs[r] = RankRecord{Rank: r, Host: h.plan.Nodes[nodeOf[r]].Host.Name, Code: -1, Generation: g.gen, Job: n, Nspace: j.nspace}
	}
	for _, kv := range sr.apps[0].Exports {
		if v, ok := strings.CutPrefix(kv, "OMPI_PARENT_PORT="); ok {
			j.port = v
		}
	}
	g.dyn.next += sr.size
	g.dyn.jobs = append(g.dyn.jobs, j)
	h.noteSpawned(j)
	used := slices.Clone(g.dyn.used)
	for _, nd := range nodeOf {
		g.dyn.used[nd]++
	}
	known := []control.Namespace{{Nspace: pmixNspace(h.jobID, g.gen, 0), NodeOf: g.generationNodes()}}
	for _, k := range g.dyn.jobs[:n-1] {
		p := k.parent
		known = append(known, control.Namespace{Nspace: k.nspace, Job: k.n, Base: k.base, NodeOf: k.nodeOf, Parent: &p})
	}
	for node, a := range h.agents {
		here := slices.Contains(j.nodes, node)
		if a.gone || !here && g.agentDone[node] {
			continue // no rank of its here, nor a server to register it with
		}
		l := g.spawnLaunch(j, node, used[node], known, d.Preput)
		if err := a.w.Send(control.TypeLaunch, l); err != nil {
			continue // its loss comes as an event
		}
		g.launched(node)
	}
}

// generationNodes is the node of each of the generation's ranks.
func (g *genState) generationNodes() []int {
	nodeOf := make([]int, len(g.h.plan.Ranks))
	for r, p := range g.h.plan.Ranks {
		nodeOf[r] = p.Node
	}
	return nodeOf
}

// spawnLaunch is node's Launch of spawned job j, whose ranks take the
// node's slots after used.
func (g *genState) spawnLaunch(j *spawnedJob, node, used int, known []control.Namespace, preput map[string]string) control.Launch {
	h := g.h
	n := h.plan.Nodes[node]
	l := h.launchFor(g.gen, node, n, h.master, h.agents[0].hello.FreePort)
	l.Ranks, l.Apps, l.Argv = nil, j.apps, j.apps[0].Argv
	l.WorldSize = j.size
	mapping, _ := rendezvous.ProcessMappingOf(j.nodeOf)
	l.PMI.KVSName, l.PMI.Mapping = j.kvs, mapping
	for r, nd := range j.nodeOf {
		if nd == node {
			l.Ranks = append(l.Ranks, control.RankSpec{Rank: r, LocalRank: len(l.Ranks), App: appIndex(j.apps, r)})
		}
	}
	l.LocalWorldSize = len(l.Ranks)
	l.Bind.Oversubscribed = used+len(l.Ranks) > n.Host.Slots || h.o.ImplicitHosts && h.plan.Oversubscribed
	l.Spawned = &control.Spawned{Job: j.n, Base: j.base, Nspace: j.nspace, Parent: j.parent, NodeOf: j.nodeOf, Nodes: j.nodes,
		SlotsUsed: used, Preput: preput, Known: known}
	return l
}

// launched counts a Launch sent to node: its agent is pending until it
// says Done for it.
func (g *genState) launched(node int) {
	if g.sent == nil {
		g.sent, g.agentDone = map[int]int{}, map[int]bool{}
	}
	g.sent[node]++
	if g.agentDone[node] {
		g.agentDone[node] = false
		g.pending++
	}
}

// spawnedStarted counts a spawned job's rank that started, or could not
// (why); the spawn is answered once every rank did one or the other.
func (g *genState) spawnedStarted(j *spawnedJob, why string) {
	if j.starting <= 0 {
		return
	}
	if why != "" && j.failed == "" {
		j.failed = why
	}
	if j.starting--; j.starting > 0 {
		return
	}
	if j.failed != "" {
		g.reply(j.asker, control.DynReply{Status: control.DynError, Err: "MPI_Comm_spawn: " + j.failed})
		return
	}
	g.reply(j.asker, control.DynReply{Nspace: j.nspace})
}

// spawnedEnded frees a spawned rank's slot. Once all its ranks ended, a
// job that never published its port (a program that does not call
// MPI_Init, spawned by Open MPI) fails its spawner's wait for that port,
// which would wait for as long as Open MPI's timeout (mpirun's hangs).
func (g *genState) spawnedEnded(j *spawnedJob, r int) {
	g.dyn.used[j.nodeOf[r]]--
	j.ended++
	for key, w := range g.dyn.lookups {
		if g.unconnected(w) == j {
			delete(g.dyn.lookups, key)
			g.failUnconnected(j, w)
		}
	}
}

// unconnected is the spawned job whose port lookup w waits for (Open
// MPI's spawner looks up "PORT:connect", which the spawned job's first
// rank publishes) when all its ranks ended without publishing it; nil
// when there is none.
func (g *genState) unconnected(w *lookupWait) *spawnedJob {
	for _, k := range w.keys {
		port, ok := strings.CutSuffix(k, ":connect")
		if !ok {
			continue
		}
		for _, j := range g.dyn.jobs {
			if j.port == port && j.ended == j.size && !j.published {
				return j
			}
		}
	}
	return nil
}

// failUnconnected fails a lookup that waits for the port of spawned job
// j, whose ranks all ended without publishing it.
func (g *genState) failUnconnected(j *spawnedJob, w *lookupWait) {
	why := fmt.Sprintf("spawned job %d (%s) ended before it connected to %s (does its program call MPI_Init?)", j.n, j.nspace, g.who(j.parent))
	g.h.notef("gorun: %s\n", why)
	g.reply(w.asker, control.DynReply{Status: control.DynNotFound, Err: why})
}

// noteSpawned records where a spawned job's ranks run, for the output
// (their tags and hosts).
func (h *head) noteSpawned(j *spawnedJob) {
	h.spawnMu.Lock()
	defer h.spawnMu.Unlock()
	if h.spawnOf == nil {
		h.spawnOf = map[int]spawnLabel{}
	}
	for r, nd := range j.nodeOf {
		h.spawnOf[j.base+r] = spawnLabel{job: j.n, rank: r, host: h.plan.Nodes[nd].Host.Name}
	}
}

// spawnLabel is a spawned rank as the output names it.
type spawnLabel struct {
	job, rank int
	host      string
}

// label is the job and rank of the rank numbered id in the job's frames
// (job 0: the generation's).
func (h *head) label(id int) (job, rank int) {
	if id < len(h.plan.Ranks) {
		return 0, id
	}
	h.spawnMu.Lock()
	defer h.spawnMu.Unlock()
	l, ok := h.spawnOf[id]
	if !ok {
		return 0, id
	}
	return l.job, l.rank
}

// hostOf is the host of the rank numbered id in the job's frames.
func (h *head) hostOf(id int) string {
	if id < len(h.plan.Ranks) {
		return h.plan.Nodes[h.plan.Ranks[id].Node].Host.Name
	}
	h.spawnMu.Lock()
	defer h.spawnMu.Unlock()
	return h.spawnOf[id].host
}

// spawnedRecs are the records of the generation's spawned ranks.
func (g *genState) spawnedRecs() []RankRecord {
	if g.dyn == nil {
		return nil
	}
	var out []RankRecord
	for _, j := range g.dyn.jobs {
		out = append(out, j.recs...)
	}
	return out
}

// fenceStore is the store of a fence: the generation's, or a spawned
// job's; nil for a job the generation has not.
func (g *genState) fenceStore(job int) *rendezvous.Store {
	if job == 0 {
		return g.h.store
	}
	if g.dyn == nil || job > len(g.dyn.jobs) {
		return nil
	}
	return g.dyn.jobs[job-1].store
}

// dynJobs are the generation's spawned jobs.
func (g *genState) dynJobs() []*spawnedJob {
	if g.dyn == nil {
		return nil
	}
	return g.dyn.jobs
}

// processes is "1 process" or "n processes".
func processes(n int) string {
	if n == 1 {
		return "1 process"
	}
	return strconv.Itoa(n) + " processes"
}

// idleHosts says which of the job's hosts run none of its ranks, and so
// no agent that could start spawned ones; "" when there are none.
func (g *genState) idleHosts() string {
	var idle []string
	for _, host := range g.h.o.Hosts {
		if !slices.ContainsFunc(g.h.plan.Nodes, func(n Node) bool { return n.Host.Name == host.Name }) {
			idle = append(idle, host.Name)
		}
	}
	if len(idle) == 0 {
		return ""
	}
	return fmt.Sprintf("; gorun spawns only on the hosts that run the job's ranks, and %s %s none", strings.Join(idle, ", "), map[bool]string{true: "runs", false: "run"}[len(idle) == 1])
}
