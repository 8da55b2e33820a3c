package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gorun/gorun/config"
)

// The Kubernetes examples (examples/kubernetes) cannot run here: no
// cluster, no JobSet controller. These tests check what makes them work
// or fail there: each document's kind, fields that Kubernetes knows (no
// typo), the headless Service that gives pod 0 the DNS name that every
// gorun's --rdzv-endpoint names, the port, the token read from the Secret
// as a file, and a gorun command line that gorun's own settings take.
//
// The manifests are decoded into the types below, which hold the fields
// of the Kubernetes (core/v1, batch/v1) and JobSet (v1alpha2) types that
// the examples use, under the same names: decoding rejects any other
// field. A new field in an example needs its line here, checked against
// the API reference. (Decoding into k8s.io/api's own types would take 17
// more modules, about 60 MiB of source, into gorun's go.mod; JobSet's
// module is not to be had here.)

// k8sDoc is a document of a manifest, of a kind whose spec is S.
type k8sDoc[S any] struct {
	APIVersion string  `yaml:"apiVersion"`
	Kind       string  `yaml:"kind"`
	Metadata   k8sMeta `yaml:"metadata"`
	Spec       S       `yaml:"spec"`
}

type k8sMeta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type k8sServiceSpec struct {
	ClusterIP                string            `yaml:"clusterIP"`
	PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
	Selector                 map[string]string `yaml:"selector"`
	Ports                    []k8sServicePort  `yaml:"ports"`
}

type k8sServicePort struct {
	Name       string `yaml:"name"`
	Port       int    `yaml:"port"`
	TargetPort any    `yaml:"targetPort"` // a number or a port's name
}

type k8sJobSetSpec struct {
	Network struct {
		EnableDNSHostnames       *bool  `yaml:"enableDNSHostnames"`
		Subdomain                string `yaml:"subdomain"`
		PublishNotReadyAddresses *bool  `yaml:"publishNotReadyAddresses"`
	} `yaml:"network"`
	FailurePolicy struct {
		MaxRestarts int `yaml:"maxRestarts"`
	} `yaml:"failurePolicy"`
	ReplicatedJobs []struct {
		Name     string `yaml:"name"`
		Replicas int    `yaml:"replicas"`
		Template struct {
			Spec k8sJobSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"replicatedJobs"`
}

type k8sJobSpec struct {
	Parallelism    int    `yaml:"parallelism"`
	Completions    int    `yaml:"completions"`
	CompletionMode string `yaml:"completionMode"`
	BackoffLimit   *int   `yaml:"backoffLimit"`
	SuccessPolicy  *struct {
		Rules []struct {
			SucceededIndexes string `yaml:"succeededIndexes"`
		} `yaml:"rules"`
	} `yaml:"successPolicy"`
	Template struct {
		Metadata k8sMeta    `yaml:"metadata"`
		Spec     k8sPodSpec `yaml:"spec"`
	} `yaml:"template"`
}

type k8sPodSpec struct {
	RestartPolicy string         `yaml:"restartPolicy"`
	Containers    []k8sContainer `yaml:"containers"`
	Volumes       []struct {
		Name   string `yaml:"name"`
		Secret *struct {
			SecretName  string `yaml:"secretName"`
			DefaultMode *int   `yaml:"defaultMode"`
		} `yaml:"secret"`
		EmptyDir *struct {
			Medium string `yaml:"medium"`
		} `yaml:"emptyDir"`
	} `yaml:"volumes"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom any    `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Resources struct {
		Limits map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

// decodeStrict decodes the YAML node n into v, refusing fields that v
// does not have.
func decodeStrict(n *yaml.Node, v any) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	d := yaml.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	return d.Decode(v)
}

// readManifest returns the documents of the manifest at path.
func readManifest(path string) ([]yaml.Node, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := yaml.NewDecoder(f)
	var docs []yaml.Node
	for {
		var doc yaml.Node
		err := d.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, len(docs)+1, err)
		}
		docs = append(docs, doc)
	}
}

func TestKubernetesExamples(t *testing.T) {
	paths, err := filepath.Glob("../../examples/kubernetes/*.yaml")
	if err != nil || len(paths) < 2 {
		t.Fatalf("examples/kubernetes: %q (%v), want jobset.yaml and jobset-elastic.yaml", paths, err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			for _, p := range jobSetProblems(path) {
				t.Error(p)
			}
		})
	}
}

// The check finds the mistakes that would break the example on a
// cluster: each case changes examples/kubernetes/jobset.yaml in one place.
func TestKubernetesExampleMistakes(t *testing.T) {
	orig, err := os.ReadFile("../../examples/kubernetes/jobset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, old, new, want string
	}{
		{"a misspelled field", "publishNotReadyAddresses: true\n  selector", "publishNotReadyAdresses: true\n  selector", "field publishNotReadyAdresses not found"},
		{"not headless", "clusterIP: None", "clusterIP: 10.0.0.1", "want a headless Service"},
		{"another subdomain", "subdomain: gorun-rdzv", "subdomain: other", `no Service "other"`},
		{"the selector misses the pods", "    app.kubernetes.io/name: gorun-train\n  ports", "    app.kubernetes.io/name: trainer\n  ports", "which the pod template's labels"},
		{"pod 1's name", "gorun-train-node-0-0.gorun-rdzv:29400", "gorun-train-node-0-1.gorun-rdzv:29400", "want pod 0's name"},
		{"the short name", "gorun-train-node-0-0.gorun-rdzv:29400", "gorun-train-node-0-0:29400", "want pod 0's name"},
		{"another port", "gorun-rdzv:29400", "gorun-rdzv:29500", "not a port of Service"},
		{"nodes and pods differ", `- "2"` + "\n", `- "3"` + "\n", "parallelism (2)"},
		{"ranks and GPUs differ", `- "4"` + "\n", `- "8"` + "\n", "the pod gets 4 GPUs"},
		{"a flag gorun lacks", "- --rdzv-id\n", "- --rdzv-name\n", "--rdzv-name is not a flag of gorun"},
		{"a value gorun refuses", "- gorun\n                    - --nnodes", "- gorun\n                    - --rdzv-timeout\n                    - soon\n                    - --nnodes", `invalid value "soon"`},
		{"the token on the command line", "- --rdzv-token-file\n                    - /etc/gorun/token\n", "- --rdzv-token-file\n                    - /etc/gorun/token\n                    - -x\n                    - GORUN_RDZV_TOKEN=abc\n", "the token goes in a file"},
		{"the token elsewhere", "mountPath: /etc/gorun/token", "mountPath: /etc/gorun/secret", "is not the key token of a Secret"},
		{"the token readable by all", "defaultMode: 0400", "defaultMode: 0444", "want 0400"},
		{"elastic without a success policy", `- "2"` + "\n", `- "1:2"` + "\n", "successPolicy"},
		{"a Secret in the manifest", "---\n", "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: gorun-rdzv-token\nstringData:\n  token: abc\n---\n", `"v1 Secret"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Contains(orig, []byte(tc.old)) {
				t.Fatalf("jobset.yaml lacks %q", tc.old)
			}
			path := filepath.Join(t.TempDir(), "jobset.yaml")
			if err := os.WriteFile(path, bytes.Replace(orig, []byte(tc.old), []byte(tc.new), 1), 0o644); err != nil {
				t.Fatal(err)
			}
			problems := jobSetProblems(path)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("problems %q, want one that says %q", problems, tc.want)
			}
		})
	}
}

// jobSetProblems checks the manifest at path, a headless Service and a
// JobSet whose pods run gorun's per-node launch, and returns what is wrong
// with it.
func jobSetProblems(path string) (problems []string) {
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	docs, err := readManifest(path)
	if err != nil {
		return []string{err.Error()}
	}
	svcs := map[string]k8sServiceSpec{}
	var jobsets []k8sDoc[k8sJobSetSpec]
	for i, doc := range docs {
		var head k8sDoc[yaml.Node]
		if err := doc.Decode(&head); err != nil {
			bad("document %d: %v", i+1, err)
			return
		}
		switch kv := head.APIVersion + " " + head.Kind; kv {
		case "v1 Service":
			var svc k8sDoc[k8sServiceSpec]
			if err := decodeStrict(&doc, &svc); err != nil {
				bad("Service %s: %v", head.Metadata.Name, err)
				return
			}
			svcs[svc.Metadata.Name] = svc.Spec
		case "jobset.x-k8s.io/v1alpha2 JobSet":
			var js k8sDoc[k8sJobSetSpec]
			if err := decodeStrict(&doc, &js); err != nil {
				bad("JobSet %s: %v", head.Metadata.Name, err)
				return
			}
			jobsets = append(jobsets, js)
		default:
			// A Secret in a manifest would put the token in a file of the
			// repository: the README creates it with kubectl.
			bad("a document of apiVersion and kind %q, want only v1 Service and jobset.x-k8s.io/v1alpha2 JobSet", kv)
		}
	}
	if len(jobsets) != 1 {
		bad("%d JobSets, want 1", len(jobsets))
		return
	}
	js, spec := jobsets[0], jobsets[0].Spec
	net := spec.Network
	if net.EnableDNSHostnames != nil && !*net.EnableDNSHostnames || net.PublishNotReadyAddresses != nil && !*net.PublishNotReadyAddresses {
		bad("JobSet network %+v: the pods need their DNS names, published before they are ready", net)
	}
	svcName := cmp.Or(net.Subdomain, js.Metadata.Name) // JobSet's default
	svc, ok := svcs[svcName]
	if !ok {
		bad("no Service %q (the JobSet's subdomain) in the manifest", svcName)
		return
	}
	if svc.ClusterIP != "None" || !svc.PublishNotReadyAddresses {
		bad("Service %s: clusterIP %q, publishNotReadyAddresses %v; want a headless Service (None) that publishes pods before they are ready",
			svcName, svc.ClusterIP, svc.PublishNotReadyAddresses)
	}
	if len(spec.ReplicatedJobs) != 1 {
		bad("%d replicated jobs, want 1 (one pod per node)", len(spec.ReplicatedJobs))
		return
	}
	rjob := spec.ReplicatedJobs[0]
	job := rjob.Template.Spec
	if rjob.Replicas != 1 || job.CompletionMode != "Indexed" || job.Parallelism != job.Completions || job.Parallelism < 1 {
		bad("replicated job %s: replicas %d, completionMode %q, parallelism %d, completions %d; want 1, Indexed, and one pod per node",
			rjob.Name, rjob.Replicas, job.CompletionMode, job.Parallelism, job.Completions)
	}
	pod := job.Template
	if len(pod.Metadata.Labels) == 0 || len(svc.Selector) == 0 {
		bad("Service %s selects %v, the pods are labelled %v: want a selector", svcName, svc.Selector, pod.Metadata.Labels)
	}
	for k, v := range svc.Selector {
		if pod.Metadata.Labels[k] != v {
			bad("Service %s selects %s=%s, which the pod template's labels %v lack", svcName, k, v, pod.Metadata.Labels)
		}
	}
	if len(pod.Spec.Containers) != 1 {
		bad("%d containers, want 1", len(pod.Spec.Containers))
		return
	}
	ctr := pod.Spec.Containers[0]
	argv := append(slices.Clone(ctr.Command), ctr.Args...)
	if len(argv) == 0 || filepath.Base(argv[0]) != "gorun" {
		bad("the container runs %q, want gorun", argv)
		return
	}
	flags, program, err := parseGorunArgs(argv[1:])
	if err != nil {
		bad("%q: %v", argv, err)
		return
	}
	if _, err := config.Load(schema(), nil, nil, flags); err != nil {
		bad("gorun refuses %q: %v", argv, err)
	}
	if len(program) == 0 {
		bad("%q runs no program", argv)
	}
	last := func(name string) string {
		if v := flags[name]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}

	// One gorun per pod: --nnodes N, or MIN:MAX with MAX pods.
	nodes := last("nnodes")
	lo, hi, elastic := strings.Cut(nodes, ":")
	if !elastic {
		hi = lo
	}
	nmin, err1 := strconv.Atoi(lo)
	nmax, err2 := strconv.Atoi(hi)
	if err1 != nil || err2 != nil || nmin < 1 || nmin > nmax || nmax != job.Parallelism {
		bad("--nnodes %q, want N or MIN:MAX with N or MAX = parallelism (%d)", nodes, job.Parallelism)
	}
	if elastic && (job.SuccessPolicy == nil || len(job.SuccessPolicy.Rules) != 1 || job.SuccessPolicy.Rules[0].SucceededIndexes != "0") {
		bad("elastic --nnodes %s: the Job must succeed when pod 0, the head, does (successPolicy succeededIndexes \"0\"): pods that were not among the nodes would hold it up", nodes)
	}
	ppn := last("nproc-per-node")
	if n, err := strconv.Atoi(ppn); err != nil || n < 1 {
		bad("--nproc-per-node %q, want a count", ppn)
	} else if gpus, ok := ctr.Resources.Limits["nvidia.com/gpu"]; ok && gpus != ppn {
		bad("--nproc-per-node %s, but the pod gets %s GPUs", ppn, gpus)
	}

	// The endpoint is pod 0's DNS name: <jobset>-<replicated job>-<job
	// index>-<pod index>.<subdomain>, and the port is the Service's and
	// the container's.
	endpoint := last("rdzv-endpoint")
	host, port, _ := strings.Cut(endpoint, ":")
	if want := fmt.Sprintf("%s-%s-0-0.%s", js.Metadata.Name, rjob.Name, svcName); host != want {
		bad("--rdzv-endpoint %q: host %q, want pod 0's name %q", endpoint, host, want)
	}
	if len(host) > 0 && len(strings.Split(host, ".")[0]) > 63 {
		bad("%s: a hostname longer than 63 characters", host)
	}
	if !slices.ContainsFunc(svc.Ports, func(p k8sServicePort) bool {
		return strconv.Itoa(p.Port) == port && fmt.Sprint(p.TargetPort) == port
	}) {
		bad("--rdzv-endpoint's port %q is not a port of Service %s (port and targetPort): %+v", port, svcName, svc.Ports)
	}
	var open bool
	for _, p := range ctr.Ports {
		open = open || strconv.Itoa(p.ContainerPort) == port
	}
	if !open {
		bad("--rdzv-endpoint's port %q is not a port of the container: %+v", port, ctr.Ports)
	}

	// The token: a file from the Secret, readable by its owner alone, and
	// never in the command line or the environment.
	tokenFile := last("rdzv-token-file")
	var fromSecret bool
	for _, m := range ctr.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			file := m.MountPath
			if m.SubPath == "" {
				file = filepath.Join(m.MountPath, "token")
			} else if m.SubPath != "token" {
				continue
			}
			if file == tokenFile && m.ReadOnly && v.Secret.SecretName != "" {
				fromSecret = true
				if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o400 {
					bad("Secret volume %s: defaultMode %v, want 0400", v.Name, v.Secret.DefaultMode)
				}
			}
		}
	}
	if !fromSecret {
		bad("--rdzv-token-file %q is not the key token of a Secret mounted read-only", tokenFile)
	}
	for _, a := range argv {
		if strings.Contains(strings.ToLower(a), "token") && a != "--rdzv-token-file" && a != tokenFile && !strings.HasPrefix(a, "--rdzv-token-file=") {
			bad("the command line holds %q: the token goes in a file", a)
		}
	}
	for _, e := range ctr.Env {
		if e.Name == "GORUN_RDZV_TOKEN" && e.ValueFrom == nil {
			bad("GORUN_RDZV_TOKEN is written in the manifest")
		}
	}
	return problems
}

// parseGorunArgs splits gorun's arguments as its command line does: the
// flags (by setting name, with their values) up to the program, and the
// program with its arguments. A flag that is not one of gorun's settings
// is an error.
func parseGorunArgs(args []string) (map[string][]string, []string, error) {
	bySpelling := map[string]setting{}
	for _, s := range settings {
		for _, n := range append([]string{s.name}, s.aliases...) {
			bySpelling[n] = s
		}
	}
	flags := map[string][]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return flags, args[i+1:], nil
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			return flags, args[i:], nil
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		s, ok := bySpelling[name]
		if !ok {
			return nil, nil, fmt.Errorf("%s is not a flag of gorun", a)
		}
		if !hasVal {
			if s.kind == config.Bool {
				val = "true"
			} else if i+1 < len(args) {
				i++
				val = args[i]
			} else {
				return nil, nil, fmt.Errorf("%s wants a value", a)
			}
		}
		flags[s.name] = append(flags[s.name], val)
	}
	return flags, nil, nil
}
