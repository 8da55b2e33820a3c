package peerargs

import (
	"strings"
	"testing"
)

// MCA exports the ranks' parameters, and reads those of Open MPI's own
// launcher as gorun's flags, a note, or a refusal that names the way:
// exported to the ranks they would change nothing.
func TestMCA(t *testing.T) {
	for _, tt := range []struct {
		name, value     string
		want, note, err string
	}{
		{"btl", "tcp,self", "-x OMPI_MCA_btl=tcp,self", "", ""},
		{"btl_tcp_if_include", "eth0", "-x OMPI_MCA_btl_tcp_if_include=eth0", "", ""},
		{"pml", "ob1", "-x OMPI_MCA_pml=ob1", "", ""},
		// Horovod's "Custom SSH ports" page.
		{"plm_rsh_args", "-p 12345", "--ssh-port 12345", "", ""},
		{"plm_rsh_args", "-p12345 -F /etc/cfg -i ~/.ssh/k -x -q", "--ssh-port 12345 --ssh-config /etc/cfg -i ~/.ssh/k", "", ""},
		{"plm_rsh_args", "-o StrictHostKeyChecking=no -o Port=22", "--ssh-accept-new --ssh-port 22", "gorun records the keys of hosts it does not know yet; a changed key is still refused", ""},
		{"plm_rsh_args", "-o ProxyJump=bastion", "", "", "ssh option -o ProxyJump=bastion: put it in an ssh config file: --ssh-config FILE (gorun reads ~/.ssh/config)"},
		{"plm_rsh_args", "-l alice", "", "", "ssh option -l alice: give the user with each host (alice@HOST in -H or the hostfile)"},
		{"plm_rsh_args", "-p", "", "", "ssh option -p: takes a value"},
		{"plm_rsh_agent", "rsh", "", "", waySSHClient},
		// mpirun(1)'s "-mca rmaps seq".
		{"rmaps", "seq", "--map-by seq", "", ""},
		{"rmaps_base_mapping_policy", "seq", "--map-by seq", "", ""},
		{"rmaps", "round_robin", "", "", ""},
		{"rmaps_base_mapping_policy", "slot:PE=2", "--map-by slot --cpus-per-rank 2", "", ""},
		{"hwloc_base_binding_policy", "core", "--bind-to core", "", ""},
		{"rmaps_base_oversubscribe", "1", "--oversubscribe=true", "", ""},
		{"rmaps_base_no_oversubscribe", "true", "--oversubscribe=false", "", ""},
		{"plm_base_verbose", "5", "", noteORTE, ""},
		{"orte_keep_fqdn_hostnames", "1", "", noteORTE, ""},
		{"routed", "direct", "", noteORTE, ""},
	} {
		args, note, err := MCA(tt.name, tt.value)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.err || strings.Join(args, " ") != tt.want || note != tt.note {
			t.Errorf("MCA(%q, %q) = %q, %q, %v; want %q, %q, %q", tt.name, tt.value, args, note, err, tt.want, tt.note, tt.err)
		}
	}
}

// MapBy reads Open MPI's --map-by with its modifiers, as plain gorun takes
// it too.
func TestMapBy(t *testing.T) {
	for spec, want := range map[string]string{"slot:PE=2": "--map-by slot --cpus-per-rank 2", "ppr:2:socket": "--map-by ppr:2:package",
		"node:OVERSUBSCRIBE": "--map-by node --oversubscribe", "ppr:1:node:PE=4": "--map-by ppr:1:node --cpus-per-rank 4"} {
		if got, err := MapBy(spec); err != nil || strings.Join(got, " ") != want {
			t.Errorf("MapBy(%q) = %q, %v; want %q", spec, got, err, want)
		}
	}
	if _, err := MapBy("slot:PE=0"); err == nil || !strings.Contains(err.Error(), "PE=0") {
		t.Errorf("MapBy(slot:PE=0): %v", err)
	}
}
