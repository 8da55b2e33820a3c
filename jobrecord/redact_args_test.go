package jobrecord

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// red is the marker, short for the tables.
const red = Redacted

func TestRedactArgs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		in, want []string
	}{
		// gorun's -x, in every spelling, and mpirun's.
		{"-x NAME=V", []string{"-x", "HF_TOKEN=hf_abcdefghijklmnopqrs", "-x", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG"},
			[]string{"-x", "HF_TOKEN=" + red, "-x", "AWS_SECRET_ACCESS_KEY=" + red}},
		{"-x=NAME=V", []string{"-x=WANDB_API_KEY=0123abcd"}, []string{"-x=WANDB_API_KEY=" + red}},
		{"--x NAME=V", []string{"--x", "MY_PASSWORD=hunter2"}, []string{"--x", "MY_PASSWORD=" + red}},
		{"--x=NAME=V", []string{"--x=MY_PASSWORD=hunter2"}, []string{"--x=MY_PASSWORD=" + red}},
		{"-x token value", []string{"-x", "MY_THING=ghp_0123456789abcdefABCDEF0123456789abcd"}, []string{"-x", "MY_THING=" + red}},
		{"-x URL password", []string{"-x", "HTTPS_PROXY=http://alice:s3cret@proxy:3128"}, []string{"-x", "HTTPS_PROXY=http://alice:" + red + "@proxy:3128"}},
		{"-x plain kept", []string{"-x", "OMP_NUM_THREADS=4", "-x", "PATH", "-x=NCCL_DEBUG=INFO"}, []string{"-x", "OMP_NUM_THREADS=4", "-x", "PATH", "-x=NCCL_DEBUG=INFO"}},
		{"gorun mpirun -x", []string{"gorun", "mpirun", "-x", "HF_TOKEN=abc", "-np", "2", "prog"}, []string{"gorun", "mpirun", "-x", "HF_TOKEN=" + red, "-np", "2", "prog"}},
		// mpiexec's -genv and -env: the name and the value apart.
		{"-genv NAME V", []string{"mpiexec", "-genv", "HF_TOKEN", "abc", "-n", "2", "prog"}, []string{"mpiexec", "-genv", "HF_TOKEN", red, "-n", "2", "prog"}},
		{"-env NAME V", []string{"-env", "DB_PASSWORD", "a b c", "--genv", "X", "hf_abcdefghijklmnopqrs"}, []string{"-env", "DB_PASSWORD", red, "--genv", "X", red}},
		{"-genv plain kept", []string{"-genv", "OMP_NUM_THREADS", "4", "prog"}, []string{"-genv", "OMP_NUM_THREADS", "4", "prog"}},
		{"-env before an option", []string{"--env", "prod", "--password", "hunter2"}, []string{"--env", "prod", "--password", red}},
		// Program arguments: options whose names look secret.
		{"--api-key V", []string{"train.py", "--api-key", "sk-proj-abc", "--password", "hunter2", "--lr", "0.1"},
			[]string{"train.py", "--api-key", red, "--password", red, "--lr", "0.1"}},
		{"--opt=V", []string{"--token=abc", "--secret=abc", "--passwd=abc", "--name=run-1"}, []string{"--token=" + red, "--secret=" + red, "--passwd=" + red, "--name=run-1"}},
		{"spellings", []string{"--hf_token", "a", "--wandb-api-key", "b", "-password", "c", "-authToken", "d", "--apiKey", "e", "--client_secret", "f",
			"--db-pwd", "g", "--key", "h", "--private-key", "i", "--passphrase", "j", "--cookie", "k", "--credentials", "l", "-pass", "m", "--DB_PASSWORD", "n"},
			[]string{"--hf_token", red, "--wandb-api-key", red, "-password", red, "-authToken", red, "--apiKey", red, "--client_secret", red,
				"--db-pwd", red, "--key", red, "--private-key", red, "--passphrase", red, "--cookie", red, "--credentials", red, "-pass", red, "--DB_PASSWORD", red}},
		{"names that do not look secret", []string{"--max-tokens", "100", "--tokenizer", "gpt2", "--keyboard", "us", "--pwd", "/d", "--author", "me", "-p", "hunter2", "--passes", "3"},
			[]string{"--max-tokens", "100", "--tokenizer", "gpt2", "--keyboard", "us", "--pwd", "/d", "--author", "me", "-p", "hunter2", "--passes", "3"}},
		{"where a secret is", []string{"--rdzv-token-file", "/run/tok", "--password-file=/p", "--key-file", "/k", "--secret-dir", "/s"},
			[]string{"--rdzv-token-file", "/run/tok", "--password-file=/p", "--key-file", "/k", "--secret-dir", "/s"}},
		{"a switch", []string{"prog", "--use-auth-token", "--model", "m", "--token"}, []string{"prog", "--use-auth-token", "--model", "m", "--token"}},
		{"empty value", []string{"--password=", "--token", ""}, []string{"--password=", "--token", ""}},
		// Program arguments: NAME=VALUE and tokens.
		{"NAME=V", []string{"DB_PASSWORD=hunter2", "model.api_key=abc", "+db.password=abc", "LR=0.1", "a=b"},
			[]string{"DB_PASSWORD=" + red, "model.api_key=" + red, "+db.password=" + red, "LR=0.1", "a=b"}},
		{"bare tokens", []string{"hf_abcdefghijklmnopqrs", "sk-ant-api03-abcdefghijklmnop", "glpat-ABCDEFGHIJKLMNOPQRST", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig"},
			[]string{red, red, red, red}},
		{"tokens inside", []string{"--header=Authorization:Bearer:ghp_0123456789abcdefABCDEF0123456789abcd", "https://ghp_0123456789abcdefABCDEF@github.com/o/r", "x,hf_abcdefghijklmnopqrs,y"},
			[]string{"--header=Authorization:Bearer:" + red, "https://" + red + "@github.com/o/r", "x," + red + ",y"}},
		{"not tokens", []string{"sk-short", "task-abcdefghijklmnopqrstuvwx", "hf_home/a/dir/not/a/token", "/data/run=3/ckpt", "-1", "-", "--"},
			[]string{"sk-short", "task-abcdefghijklmnopqrstuvwx", "hf_home/a/dir/not/a/token", "/data/run=3/ckpt", "-1", "-", "--"}},
		{"URL password", []string{"--db", "postgres://me:hunter2@db/x"}, []string{"--db", "postgres://me:" + red + "@db/x"}},
		// Scripts: each word as an argument.
		{"sh -c", []string{"sh", "-c", "cd /w && HF_TOKEN=abc  python train.py --api-key sk-123 --lr 0.1\n\tcurl -H 'Authorization: Bearer ghp_0123456789abcdefABCDEF01' x"},
			[]string{"sh", "-c", "cd /w && HF_TOKEN=" + red + "  python train.py --api-key " + red + " --lr 0.1\n\tcurl -H 'Authorization: Bearer " + red + "' x"}},
		{"sh -c NAME=V first", []string{"sh", "-c", "HF_TOKEN=abc python train.py"}, []string{"sh", "-c", "HF_TOKEN=" + red}},
		{"-x value with blanks", []string{"-x", "MY_PASSWORD=a b c", "-x", "A=1 2", "-x", "CMD=python x.py --password hunter2 hf_abcdefghijklmnopqrs"},
			[]string{"-x", "MY_PASSWORD=" + red, "-x", "A=1 2", "-x", "CMD=python x.py --password " + red + " " + red}},
		{"sh -c kept", []string{"sh", "-c", `if [ "$RANK" = 1 ]; then echo "bad batch" >&2; exit 3; fi`},
			[]string{"sh", "-c", `if [ "$RANK" = 1 ]; then echo "bad batch" >&2; exit 3; fi`}},
		{"option with blanks", []string{"-H Authorization: Bearer ghp_0123456789abcdefABCDEF01", "-x=MY_PASSWORD=a b c", "-x=A=1 2"},
			[]string{"-H Authorization: Bearer " + red, "-x=MY_PASSWORD=" + red, "-x=A=1 2"}},
		{"--opt=text", []string{"--header=Authorization: Bearer ghp_0123456789abcdefABCDEF01"}, []string{"--header=Authorization: Bearer " + red}},
		// The review's reproduction (hole 6b).
		{"review 6b", []string{"gorun", "--record", "R", "-x", "HF_TOKEN=hf_abcdefghijklmnopqrs", "-x", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
			"-x", "WANDB_API_KEY=0123456789abcdef", "-x", "MY_PASSWORD=hunter2", "-np", "1", "true", "--api-key", "sk-abcdefghijklmnopqrstu", "--password", "hunter2"},
			[]string{"gorun", "--record", "R", "-x", "HF_TOKEN=" + red, "-x", "AWS_SECRET_ACCESS_KEY=" + red,
				"-x", "WANDB_API_KEY=" + red, "-x", "MY_PASSWORD=" + red, "-np", "1", "true", "--api-key", red, "--password", red}},
	} {
		in := slices.Clone(tt.in)
		got := RedactArgs(in)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: RedactArgs(%q) =\n%q\nwant\n%q", tt.name, tt.in, got, tt.want)
		}
		if !slices.Equal(in, tt.in) {
			t.Errorf("%s: RedactArgs changed its input: %q", tt.name, in)
		}
		if again := RedactArgs(got); !slices.Equal(again, got) {
			t.Errorf("%s: redacting twice gives %q, once %q", tt.name, again, got)
		}
	}
	if RedactArgs(nil) != nil {
		t.Errorf("RedactArgs(nil) is not nil")
	}
}

// TestRecordRedactsArgs writes a record whose command lines are in clear
// (as the head fills it: os.Args, and the summary's argv) and checks that
// neither file holds a secret and that the record itself is unchanged;
// and reads back one that an older gorun wrote in clear
// (testdata/secrets.json): its command lines come back redacted.
func TestRecordRedactsArgs(t *testing.T) {
	t.Parallel()
	secrets := []string{"hf_abcdefghijklmnopqrs", "wJalrXUtnFEMI", "sk-abcdefghijklmnopqrstu", "hunter2"}
	argv := []string{"gorun", "--record", "R", "-x", "HF_TOKEN=hf_abcdefghijklmnopqrs", "-x", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI",
		"-np", "1", "true", "--api-key", "sk-abcdefghijklmnopqrstu", "--password", "hunter2"}
	summary := `{"job_id":"j1","argv":["true","--api-key","sk-abcdefghijklmnopqrstu","--password","hunter2"],"np":1}`
	rec := &Record{JobID: "j1", Argv: slices.Clone(argv), Summary: json.RawMessage(summary)}
	dir := t.TempDir()
	if err := rec.Write(dir); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.Argv, argv) || string(rec.Summary) != summary {
		t.Errorf("Write changed the record: %q, %s", rec.Argv, rec.Summary)
	}
	for _, name := range []string{JSONFile, TextFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Errorf("%s holds %q:\n%s", name, s, b)
			}
		}
	}
	text, _ := os.ReadFile(filepath.Join(dir, TextFile))
	if want := "--api-key '<redacted>' --password '<redacted>'"; !strings.Contains(string(text), want) {
		t.Errorf("%s's command lacks %q:\n%s", TextFile, want, text)
	}
	// Already redacted, the summary keeps its members' order.
	back, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	clean := &Record{JobID: "j1", Summary: json.RawMessage(`{"job_id":"j1","argv":["true","--lr","0.1"],"np":1}`)}
	if clean.redact(); string(clean.Summary) != `{"job_id":"j1","argv":["true","--lr","0.1"],"np":1}` {
		t.Errorf("a summary without secrets changed: %s", clean.Summary)
	}

	old, err := Read(filepath.Join("testdata", "secrets.json"))
	if err != nil {
		t.Fatal(err)
	}
	for i, got := range []*Record{back, old} {
		var s struct{ Argv []string }
		if err := json.Unmarshal(got.Summary, &s); err != nil {
			t.Fatal(err)
		}
		if want := []string{"true", "--api-key", red, "--password", red}; !slices.Equal(s.Argv, want) {
			t.Errorf("record %d: the summary's argv %q, want %q", i, s.Argv, want)
		}
		if !slices.Equal(got.Argv, RedactArgs(argv)) {
			t.Errorf("record %d: argv %q, want %q", i, got.Argv, RedactArgs(argv))
		}
	}
}
