package jobrecord

import (
	"reflect"
	"testing"
)

func TestDiff(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		head, host []string
		want       EnvDiff
	}{
		{name: "same", head: []string{"A=1", "B=2"}, host: []string{"B=2", "A=1"}},
		{
			name: "added changed removed, sorted by name",
			head: []string{"PATH=/venv/bin:/usr/bin", "VIRTUAL_ENV=/venv", "Z=1", "A_B=1", "A=1"},
			host: []string{"PATH=/usr/bin", "Z=1", "NEW=x", "CUDA_HOME=/usr/local/cuda", "A=2", "A_B=2"},
			want: EnvDiff{Added: []string{"CUDA_HOME=/usr/local/cuda", "NEW=x"}, Changed: []string{"A=2", "A_B=2", "PATH=/usr/bin"}, Removed: []string{"VIRTUAL_ENV"}},
		},
		{
			name: "per-process and per-session noise ignored",
			head: []string{"PWD=/a", "SHLVL=2", "_=/usr/bin/gorun", "TERM=xterm", "DISPLAY=:0", "SSH_AUTH_SOCK=/tmp/a", "BASH_FUNC_module%%=() {  eval", "HOSTNAME=head"},
			host: []string{"PWD=/b", "SHLVL=1", "SSH_CONNECTION=10.0.0.1 22 10.0.0.2 22", "SSH_CLIENT=x", "GORUN_HEAD_CERT=ab", "HOSTNAME=node1", "SLURM_PROCID=3", "SLURMD_NODENAME=node1"},
		},
		{
			name: "the last of a name counts; entries without = are left out",
			head: []string{"A=1", "A=2", "junk"},
			host: []string{"A=2"},
		},
		{
			name: "redacted values compare equal",
			head: Redact([]string{"HF_TOKEN=one"}),
			host: Redact([]string{"HF_TOKEN=two"}),
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Diff(tt.head, tt.host)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Diff =\n%#v\nwant\n%#v", got, tt.want)
			}
			if got.Empty() != (len(tt.want.Added)+len(tt.want.Changed)+len(tt.want.Removed) == 0) {
				t.Errorf("Empty() = %v for %#v", got.Empty(), got)
			}
		})
	}
}
