package launcher

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/filetrust"
	"github.com/gorun/gorun/internal/pluginbin"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/plugins/pmixbridge"
	"github.com/gorun/gorun/rendezvous"
)

// PMIx modes (--pmix).
const (
	PMIxAuto = "auto" // serve PMIx when the program needs it
	PMIxOn   = "on"
	PMIxOff  = "off"
)

// needsPMIx says whether a program needs a PMIx server to start as one job
// (Open MPI 4 speaks nothing else), and why: an ELF program that links
// Open MPI's libmpi.so.40 or libpmix, or a Python program that uses mpi4py
// (Debian links mpi4py to Open MPI). A program that runs a script is read
// as far as its first 256 KiB; a script named by a relative path is found
// in dir, the ranks' working directory ("" = this process's).
func needsPMIx(path string, argv []string, dir string) (bool, string) {
	if why := elfNeedsPMIx(path); why != "" {
		return true, why
	}
	base := filepath.Base(path)
	if strings.HasPrefix(base, "python") {
		for i, a := range argv[1:] {
			if a == "-m" && i+2 < len(argv) && strings.HasPrefix(argv[i+2], "mpi4py") {
				return true, "it runs mpi4py"
			}
			if a == "-c" && i+2 < len(argv) && strings.Contains(argv[i+2], "mpi4py") {
				return true, "it imports mpi4py"
			}
			if !strings.HasPrefix(a, "-") {
				if mentions(inDir(dir, a), "mpi4py") {
					return true, a + " imports mpi4py"
				}
				break
			}
		}
		return false, ""
	}
	// A script run directly: its interpreter line says what runs it.
	if head := readHead(path, 256); bytes.HasPrefix(head, []byte("#!")) && bytes.Contains(head, []byte("python")) {
		if mentions(path, "mpi4py") {
			return true, path + " imports mpi4py"
		}
	}
	return false, ""
}

// inDir is path as a process whose working directory is dir opens it.
func inDir(dir, path string) string {
	if dir == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

// elfNeedsPMIx names the Open MPI or PMIx library an ELF file links.
func elfNeedsPMIx(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	for _, l := range libs {
		if strings.HasPrefix(l, "libmpi.so.40") || strings.HasPrefix(l, "libpmix.so") || strings.HasPrefix(l, "libopen-rte.so") {
			return "it links " + l
		}
	}
	return ""
}

func readHead(path string, n int) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, n)
	k, _ := io.ReadFull(f, b)
	return b[:k]
}

func mentions(path, word string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 256<<10))
	return bytes.Contains(b, []byte(word))
}

// PMIxPluginEnv names the gorun-pmix binary an agent uses, overriding the
// search.
const PMIxPluginEnv = "GORUN_PMIX_PLUGIN"

// findPMIxPlugin finds gorun-pmix: $GORUN_PMIX_PLUGIN, else next to the
// running gorun (where `make build` puts it, and where staging copies it),
// else in PATH. The file found must pass pluginbin.CheckBinary (an error
// that wraps filetrust.ErrUnsafe); pmixbridge.Start checks it again.
func findPMIxPlugin() (string, error) {
	if p := os.Getenv(PMIxPluginEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$%s: %w", PMIxPluginEnv, err)
		}
		if err := pluginbin.CheckBinary(p); err != nil {
			return "", fmt.Errorf("$%s: %w", PMIxPluginEnv, err)
		}
		return p, nil
	}
	var dirs []string
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	p, _, err := pluginbin.Find(pmixbridge.Binary, dirs...)
	return p, err
}

// pmixStartTimeout bounds how long the agent waits for gorun-pmix's hello.
const pmixStartTimeout = 20 * time.Second

// pmixState is one generation's PMIx server on this host: the gorun-pmix
// plugin process and the goroutine that answers its events. It serves the
// generation's namespace and those of the jobs its ranks spawned.
type pmixState struct {
	a      *agent
	gen    int
	nspace string // the generation's
	node   int
	client *pmixbridge.Client
	env    map[int][]string
	cancel context.CancelFunc
	wg     sync.WaitGroup
	dir    string

	mu     sync.Mutex
	fence  map[string]int    // fences seen so far, by namespace
	spaces map[string]pmixNS // the namespaces registered, by name
}

// pmixNS is a namespace the server serves: a job of the generation.
type pmixNS struct {
	job    int // its spawned job (control.Spawned.Job); 0: the generation
	base   int // its ranks' first number in the job's frames
	member int // this host's member number in its fences
}

// startPMIx starts the plugin and registers the launch's ranks. It returns
// nil, nil when the launch does not need PMIx: none of its programs
// (paths, resolved, one per app: launchApp) links Open MPI or imports
// mpi4py.
func (a *agent) startPMIx(l control.Launch, paths ...string) (*pmixState, error) {
	mode := l.PMI.PMIx
	if mode == "" || mode == PMIxOff {
		return nil, nil
	}
	if mode == PMIxAuto {
		need := false
		for k, path := range paths {
			app := launchApp(l, k)
			if n, _ := needsPMIx(path, app.Argv, app.Dir); n {
				need = true
				break
			}
		}
		if !need {
			return nil, nil
		}
	}
	plug, err := findPMIxPlugin()
	if errors.Is(err, filetrust.ErrUnsafe) {
		return nil, fmt.Errorf("the program needs a PMIx server (Open MPI or mpi4py): %w; gorun runs only a %s that nobody but you and root can change", err, pmixbridge.Binary)
	}
	if err != nil {
		return nil, fmt.Errorf("the program needs a PMIx server (Open MPI or mpi4py), and gorun's PMIx plugin is missing: %w; build it with `make build` or run with --pmix=off", err)
	}
	nodeOf, err := rendezvous.ParseProcessMapping(l.PMI.Mapping, l.WorldSize)
	if err != nil {
		return nil, err
	}
	s, err := a.newPMIx(l, plug)
	if err != nil {
		return nil, err
	}
	rep, err := s.register(l, pmixbridge.StartRequest{Nspace: s.nspace, NodeOf: nodeOf, AppOf: appNumbers(l.Apps, l.WorldSize)},
		pmixNS{member: l.NodeRank})
	if err != nil {
		s.close()
		return nil, err
	}
	s.env = rep.Env
	return s, nil
}

// newPMIx starts the plugin at plug for the generation of l, with the
// goroutine that answers its events; it serves no namespace yet.
func (a *agent) newPMIx(l control.Launch, plug string) (*pmixState, error) {
	if len(l.PMI.Hosts) == 0 || l.NodeRank >= len(l.PMI.Hosts) {
		return nil, fmt.Errorf("PMIx: the launch names %d hosts, this is node %d", len(l.PMI.Hosts), l.NodeRank)
	}
	dir, err := os.MkdirTemp("", "gorun-pmix-"+l.JobID+"-")
	if err != nil {
		return nil, fmt.Errorf("PMIx: %w", err)
	}
	// libpmix makes its rendezvous files in TMPDIR: a directory of this
	// job's, removed with the plugin.
	client, err := pmixbridge.Start(plug, []string{"TMPDIR=" + dir}, a.o.Log, pmixStartTimeout)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &pmixState{a: a, gen: l.Generation, nspace: pmixNspace(l.JobID, l.Generation, 0),
		node: l.NodeRank, client: client, dir: dir, fence: map[string]int{}, spaces: map[string]pmixNS{}}
	ectx, ecancel := context.WithCancel(context.Background())
	s.cancel = ecancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.client.Events(ectx, s.event); err != nil && ectx.Err() == nil {
			a.log.printf("PMIx plugin: %v", err)
		}
	}()
	return s, nil
}

// pmixNspace is the PMIx namespace of a job's generation gen (spawned 0)
// or of the spawned-th job its ranks spawned.
func pmixNspace(jobID string, gen, spawned int) string {
	ns := "gorun." + jobID + "." + strconv.Itoa(gen)
	if spawned > 0 {
		ns += "." + strconv.Itoa(spawned)
	}
	return ns
}

// register registers a namespace of l's generation (r: its name, ranks'
// nodes, apps and parent; the rest comes from l) with the server, which
// serves it as ns says. It returns the local ranks' environments.
func (s *pmixState) register(l control.Launch, r pmixbridge.StartRequest, ns pmixNS) (*pmixbridge.StartReply, error) {
	r.Hosts, r.Node, r.UID, r.GID, r.UnivSize = l.PMI.Hosts, l.NodeRank, os.Getuid(), os.Getgid(), l.PMI.UnivSize
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := s.client.Start(ctx, &r)
	if err != nil {
		return nil, fmt.Errorf("PMIx: namespace %s: %w", r.Nspace, err)
	}
	s.mu.Lock()
	s.spaces[r.Nspace] = ns
	s.mu.Unlock()
	return rep, nil
}

// space is a namespace the server serves, if it does.
func (s *pmixState) space(nspace string) (pmixNS, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns, ok := s.spaces[nspace]
	return ns, ok
}

// event answers one event of the plugin.
func (s *pmixState) event(e *pmixbridge.Event) {
	a := s.a
	switch e.Kind {
	case pmixbridge.EventAbort:
		if e.Msg == "N/A" { // Open MPI's "no message"
			e.Msg = ""
		}
		ns, _ := s.space(e.Nspace)
		a.w.Send(control.TypeAbort, control.Abort{Generation: s.gen, Rank: ns.base + e.Rank, Code: e.Status, Msg: e.Msg})
	case pmixbridge.EventFence:
		if len(e.Procs) != 1 || e.Procs[0].Rank != pmixbridge.Wildcard || e.Procs[0].Nspace != e.Nspace {
			go s.fenceProcs(e) // ranks of several namespaces: the head's
			return
		}
		s.mu.Lock()
		s.fence[e.Nspace]++
		seq := s.fence[e.Nspace]
		s.mu.Unlock()
		go s.fenceAcross(e, seq)
	default:
		go s.request(e)
	}
}

// fenceAcross completes a PMIx fence across hosts: this host's data goes to
// the head's store as one put, and the fence returns every host's, which
// PMIx wants concatenated.
func (s *pmixState) fenceAcross(e *pmixbridge.Event, seq int) {
	ns, ok := s.space(e.Nspace)
	if !ok {
		ns.member = s.node
	}
	prefix := "pmix." + strconv.Itoa(seq) + "."
	key := fmt.Sprintf("%s%09d", prefix, ns.member)
	f := &hostFencer{a: s.a, gen: s.gen, job: ns.job, node: ns.member}
	kvs, err := f.Fence(context.Background(), map[string]string{key: base64.StdEncoding.EncodeToString(e.Data)})
	done := &pmixbridge.FenceDone{ID: e.ID}
	if err != nil {
		done.Err = err.Error()
	} else {
		for k, v := range kvs.All() { // in key order: by node
			if !strings.HasPrefix(k, prefix) {
				continue
			}
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				done.Err = fmt.Sprintf("fence data of %s: %v", k, err)
				break
			}
			done.Data = append(done.Data, b...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.client.FenceDone(ctx, done); err != nil {
		s.a.log.printf("PMIx fence: %v", err)
	}
}

// leftEarly says whether a rank that exited with status 0 had started MPI
// (PMIx_Init) without finishing it (PMIx_Finalize): that ends the job, as
// its peers would wait for it forever.
func (s *pmixState) leftEarly(nspace string, rank int) bool {
	if s == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := s.client.Rank(ctx, nspace, rank)
	return err == nil && st.Connected && !st.Finalized
}

// nspaceOf is the namespace of the spawned job (0: the generation's).
func (s *pmixState) nspaceOf(job int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, ns := range s.spaces {
		if ns.job == job {
			return name
		}
	}
	return ""
}

// close stops the plugin and removes its directory. Its ranks are gone by
// then, and libpmix keeps nothing outside that directory: the plugin is
// killed rather than asked to finish, which would cost milliseconds at
// the end of every job.
func (s *pmixState) close() {
	if s == nil {
		return
	}
	if s.cancel != nil {
		s.cancel()
	}
	// Deregistering the generation runs libpmix's epilog: the files its
	// clients registered for clean-up (Open MPI's shared-memory segments
	// in /dev/shm) are removed, even when the ranks were killed.
	s.mu.Lock()
	names := slices.Sorted(maps.Keys(s.spaces))
	s.mu.Unlock()
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := s.client.Stop(ctx, name); err != nil {
			s.a.log.printf("PMIx: forgetting %s: %v", name, err)
		}
		cancel()
	}
	s.client.Close()
	s.wg.Wait()
	os.RemoveAll(s.dir)
}
