// This file holds the agent's part in dynamic processes: starting this
// host's ranks of a job that the generation's ranks spawned
// (MPI_Comm_spawn), registering its namespace with the PMIx server here,
// and carrying the ranks' requests that only the head can answer (spawns,
// name publishing, connects, another host's PMIx data) to the head and
// its answers back. The head's part is head_dyn.go.

package launcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gorun/gorun/internal/filetrust"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/plugins/pmixbridge"
	"github.com/gorun/gorun/rendezvous"
)

// dynJob is a spawned job as this host serves it.
type dynJob struct {
	l   control.Launch
	pmi *pmiState // the PMI-1 server of its ranks here; nil without any
}

// launchSpawned starts this host's ranks of a spawned job (l.Spawned;
// none on a host that only registers its namespace), beside the
// generation's.
func (a *agent) launchSpawned(l control.Launch) {
	sp := l.Spawned
	a.launches++
	a.live += len(l.Ranks)
	if a.dyn == nil {
		a.dyn = map[int]*dynJob{}
	}
	dj := &dynJob{l: l}
	a.dyn[sp.Job] = dj
	switch {
	case l.Generation != a.gen || a.stopped:
		// The job is stopping: its new ranks end as they come.
		for _, s := range l.Ranks {
			a.send(control.TypeExited, control.Exited{Generation: l.Generation, Rank: sp.Base + s.Rank, End: time.Now(), Code: 1,
				Stopped: true, Err: "not started: the job was stopping"})
			a.live--
		}
	case len(l.Ranks) == 0:
		if a.pmix != nil {
			ns := spawnedNamespace(sp)
			if _, err := a.pmix.register(l, pmixStart(ns, true), a.pmixNS(ns, l)); err != nil {
				a.log.printf("%v", err)
			}
		}
	default:
		a.startSpawned(dj)
	}
	if a.live == 0 {
		a.done()
	}
}

// startSpawned starts this host's ranks of a spawned job.
func (a *agent) startSpawned(dj *dynJob) {
	l := dj.l
	p := newLaunchPlan(l)
	pmi, err := a.startPMI(l)
	if err != nil {
		a.log.printf("PMI server of %s: %v", l.Spawned.Nspace, err)
	} else {
		dj.pmi, p.pmi = pmi, pmi
	}
	code, msg := a.resolveAll(p)
	if msg == "" && p.bindErr != nil {
		code, msg = 2, "binding: "+p.bindErr.Error()
	}
	if msg == "" {
		if err := a.spawnedPMIx(p); err != nil {
			code, msg = 2, err.Error()
		}
	}
	if msg != "" {
		for i := range l.Ranks {
			a.failRank(l.Generation, p.id(i), code, msg)
		}
		return
	}
	ooms := 0
	if !a.simulated() {
		ooms = oomKills()
		growForLaunch(len(l.Ranks))
	}
	procs, errs := a.forkAll(p)
	a.register(p, procs, errs, ooms)
}

// spawnedPMIx registers a spawned job's namespace with this host's PMIx
// server, starting one when its programs need PMIx and none runs (this
// host ran no rank that needed it, or its ranks had all ended): that one
// registers the generation's earlier namespaces too (Spawned.Known), for
// the ranks to connect to. It fills in the ranks' PMIx environments.
func (a *agent) spawnedPMIx(p *launchPlan) error {
	l := p.l
	if a.pmix == nil {
		mode := l.PMI.PMIx
		need := mode == PMIxOn
		if mode == PMIxAuto {
			for k, path := range p.paths {
				app := launchApp(l, k)
				if n, _ := needsPMIx(path, app.Argv, app.Dir); n {
					need = true
				}
			}
		}
		if !need {
			return nil
		}
		plug, err := findPMIxPlugin()
		if errors.Is(err, filetrust.ErrUnsafe) {
			return fmt.Errorf("the spawned program needs a PMIx server (Open MPI or mpi4py): %w; gorun runs only a %s that nobody but you and root can change", err, pmixbridge.Binary)
		}
		if err != nil {
			return fmt.Errorf("the spawned program needs a PMIx server (Open MPI or mpi4py), and gorun's PMIx plugin is missing: %w", err)
		}
		s, err := a.newPMIx(l, plug)
		if err != nil {
			return err
		}
		for _, k := range l.Spawned.Known {
			if _, err := s.register(l, pmixStart(k, true), a.pmixNS(k, l)); err != nil {
				s.close()
				return err
			}
		}
		a.pmix = s
	}
	ns := spawnedNamespace(l.Spawned)
	r := pmixStart(ns, false)
	r.AppOf = appNumbers(l.Apps, l.WorldSize)
	rep, err := a.pmix.register(l, r, a.pmixNS(ns, l))
	if err != nil {
		return err
	}
	p.pmixEnv = rep.Env
	return nil
}

// spawnedNamespace is a spawned job's namespace.
func spawnedNamespace(sp *control.Spawned) control.Namespace {
	p := sp.Parent
	return control.Namespace{Nspace: sp.Nspace, Job: sp.Job, Base: sp.Base, NodeOf: sp.NodeOf, Parent: &p}
}

// pmixStart is the plugin's registration of namespace ns (remote: without
// ranks here).
func pmixStart(ns control.Namespace, remote bool) pmixbridge.StartRequest {
	r := pmixbridge.StartRequest{Nspace: ns.Nspace, NodeOf: ns.NodeOf, Remote: remote}
	if ns.Parent != nil {
		r.Parent = &pmixbridge.Proc{Nspace: ns.Parent.Nspace, Rank: ns.Parent.Rank}
	}
	return r
}

// pmixNS is how this host's PMIx server serves namespace ns.
func (a *agent) pmixNS(ns control.Namespace, l control.Launch) pmixNS {
	member := l.NodeRank
	if ns.Job != 0 {
		member = slices.Index(distinctNodes(ns.NodeOf), l.NodeRank)
	}
	return pmixNS{job: ns.Job, base: ns.Base, member: member}
}

// distinctNodes are the nodes of nodeOf in the order they first appear:
// a spawned job's fence members (control.Spawned.Nodes).
func distinctNodes(nodeOf []int) []int {
	var out []int
	for _, n := range nodeOf {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// closeDyn closes the spawned jobs' PMI-1 servers, whose ranks here have
// ended.
func (a *agent) closeDyn() {
	for _, dj := range a.dyn {
		dj.pmi.close()
		dj.pmi = nil
	}
}

// endDyn forgets the generation's spawned jobs.
func (a *agent) endDyn() {
	a.closeDyn()
	a.dyn = nil
}

// dynCall sends a request to the head and waits for its answer, until
// ctx is done or the agent ends.
func (a *agent) dynCall(ctx context.Context, d control.Dyn) control.DynReply {
	ch := make(chan control.DynReply, 1)
	err := a.post(ctx, dynCalled{d, ch})
	if err == nil {
		select {
		case r := <-ch:
			return r
		case <-ctx.Done():
			err = ctx.Err()
		case <-a.quit:
			err = errAgentEnded
		}
	}
	return control.DynReply{Kind: d.Kind, Status: control.DynError, Err: err.Error()}
}

// onDynCalled numbers a request to the head and sends it; the answer goes
// to its waiter (dynReplied).
func (a *agent) onDynCalled(e dynCalled) {
	a.dynNext++
	e.ID = a.dynNext
	a.dynWait[e.ID] = e.reply
	a.send(control.TypeDyn, e.Dyn)
}

// answerDyn answers the head's question for this host's PMIx server px
// (nil: none runs): the data one of its ranks committed, which a rank on
// another host wants.
func (a *agent) answerDyn(d control.Dyn, px *pmixState) {
	r := control.DynReply{ID: d.ID, Kind: d.Kind}
	switch {
	case d.Kind != control.DynModex || len(d.Procs) != 1:
		r.Status, r.Err = control.DynNotSupported, fmt.Sprintf("an agent answers no %q request", d.Kind)
	case px == nil:
		r.Status, r.Err = control.DynNotFound, fmt.Sprintf("no PMIx server runs on this host for rank %d of %s", d.Procs[0].Rank, d.Procs[0].Nspace)
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		data, err := px.client.Modex(ctx, pmixbridge.Proc{Nspace: d.Procs[0].Nspace, Rank: d.Procs[0].Rank})
		cancel()
		if err != nil {
			r.Status, r.Err = control.DynNotFound, err.Error()
		}
		r.Data = data
	}
	a.w.Send(control.TypeDynRe, r)
}

// request carries a PMIx request of a local rank to the head, and its
// answer back to the plugin.
func (s *pmixState) request(e *pmixbridge.Event) {
	d := control.Dyn{Kind: e.Kind, Generation: s.gen, From: control.Proc{Nspace: e.Nspace, Rank: e.Rank}}
	for _, kv := range e.Info {
		d.Info = append(d.Info, control.KV{Key: kv.Key, Value: kv.Value})
	}
	d.Keys = e.Keys
	for _, p := range e.Procs {
		d.Procs = append(d.Procs, control.Proc{Nspace: p.Nspace, Rank: p.Rank})
	}
	switch e.Kind {
	case pmixbridge.EventSpawn:
		for _, app := range e.Spawn {
			argv := []string{app.Cmd}
			if len(app.Argv) > 1 {
				argv = append(argv, app.Argv[1:]...)
			}
			da := control.DynApp{Argv: argv, Env: app.Env, Dir: app.Dir, Size: app.MaxProcs}
			for _, kv := range app.Info {
				da.Info = append(da.Info, control.KV{Key: kv.Key, Value: kv.Value})
			}
			d.Apps = append(d.Apps, da)
		}
	case pmixbridge.EventDirectModex:
		d.Kind = control.DynModex
	}
	r := s.a.dynCall(context.Background(), d)
	done := &pmixbridge.Done{ID: e.ID, Kind: e.Kind, Status: r.Status, Nspace: r.Nspace, Data: r.Data}
	for _, f := range r.Found {
		done.Found = append(done.Found, pmixbridge.Published{Key: f.Key, Value: f.Value,
			Publisher: pmixbridge.Proc{Nspace: f.Publisher.Nspace, Rank: f.Publisher.Rank}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.client.Done(ctx, done); err != nil {
		s.a.log.printf("PMIx %s of rank %d of %s: %v", e.Kind, e.Rank, e.Nspace, err)
	}
}

// fenceProcs completes a PMIx fence over ranks of several namespaces
// (Open MPI's MPI_Comm_disconnect fences both sides of an
// intercommunicator): the head gathers every host's data, which the
// fence returns concatenated.
func (s *pmixState) fenceProcs(e *pmixbridge.Event) {
	d := control.Dyn{Kind: control.DynFence, Generation: s.gen, From: control.Proc{Nspace: e.Nspace, Rank: -1}, Data: e.Data}
	for _, p := range e.Procs {
		d.Procs = append(d.Procs, control.Proc{Nspace: p.Nspace, Rank: p.Rank})
	}
	r := s.a.dynCall(context.Background(), d)
	done := &pmixbridge.FenceDone{ID: e.ID, Data: r.Data}
	if r.Status != control.DynOK {
		done.Err = r.Err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.client.FenceDone(ctx, done); err != nil {
		s.a.log.printf("PMIx fence of %s: %v", e.Nspace, err)
	}
}

// pmiName carries a PMI-1 rank's name publishing (op: publish, lookup or
// unpublish) to the head: it returns a lookup's port. ctx is the PMI-1
// server's, done as it closes.
func (a *agent) pmiName(ctx context.Context, gen int, kvs string, rank int, op, service, port string) (string, error) {
	d := control.Dyn{Kind: op, Generation: gen, From: control.Proc{Nspace: kvs, Rank: rank}, PMI: true}
	if op == control.DynPublish {
		d.Info = []control.KV{{Key: service, Value: port}}
	} else {
		d.Keys = []string{service}
	}
	r := a.dynCall(ctx, d)
	if r.Status != control.DynOK {
		return "", errors.New(r.Err)
	}
	if op == control.DynLookup {
		if len(r.Found) == 0 {
			return "", fmt.Errorf("%s is not published", service)
		}
		return r.Found[0].Value, nil
	}
	return "", nil
}

// pmiSpawn carries a PMI-1 rank's MPI_Comm_spawn to the head; it returns
// once the spawned ranks started, or why they did not. ctx is the PMI-1
// server's, done as it closes.
func (a *agent) pmiSpawn(ctx context.Context, gen int, kvs string, rank int, sp rendezvous.PMISpawn) error {
	d := control.Dyn{Kind: control.DynSpawn, Generation: gen, From: control.Proc{Nspace: kvs, Rank: rank}, PMI: true, Preput: sp.Preput}
	for _, app := range sp.Apps {
		da := control.DynApp{Argv: append([]string{app.Exec}, app.Args...), Size: app.NProcs}
		for _, kv := range app.Info {
			da.Info = append(da.Info, control.KV{Key: kv[0], Value: kv[1]})
		}
		d.Apps = append(d.Apps, da)
	}
	if r := a.dynCall(ctx, d); r.Status != control.DynOK {
		return errors.New(r.Err)
	}
	return nil
}
