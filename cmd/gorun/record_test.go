package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/jobrecord"
)

// TestRecordRedactsArgs runs the security review's reproduction of hole
// 6b: secrets given with -x, in each of its spellings and the
// personalities' (mpirun -x, mpiexec -genv and -env), and as program
// arguments (--api-key V, --password V, --token=V, NAME=V, a bare token).
// None may appear in record.json, record.txt, --summary-json or what
// gorun show prints, in text or JSON; the ranks still get the real values;
// and the recorded command lines keep their shape: the same arguments in
// the same places, secrets replaced by <redacted>.
func TestRecordRedactsArgs(t *testing.T) {
	t.Parallel()
	const (
		hfToken  = "hf_abcdefghijklmnopqrs"
		awsKey   = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
		wandbKey = "0123456789abcdef0123456789abcdef01234567"
		myPass   = "correct-horse-battery-staple"
		ghThing  = "ghp_0123456789abcdefABCDEF0123456789abcd"
		apiKey   = "sk-proj-abcdefghijklmnopqrstuvwx"
		password = "hunter2-in-the-clear"
		token    = "plain-token-value-77"
		dbPass   = "db-pass-in-the-clear"
		bareTok  = "glpat-ABCDEFGHIJKLMNOPQRSTUVWX"
	)
	secrets := []string{hfToken, awsKey, wandbKey, myPass, ghThing, apiKey, password, token, dbPass, bareTok}
	const r = jobrecord.Redacted
	// The rank writes what it got, to show that the record's redaction
	// is the record's alone.
	script := `printf '%s|%s|%s' "$HF_TOKEN" "$MY_PASSWORD" "$GH_THING" > "$0"`
	prog := func(out string) (args, want []string) {
		return []string{"sh", "-c", script, out, "--api-key", apiKey, "--password", password, "--token=" + token,
				"DB_PASSWORD=" + dbPass, bareTok, "--name", "run-1", "LR=0.1"},
			[]string{"sh", "-c", script, out, "--api-key", r, "--password", r, "--token=" + r,
				"DB_PASSWORD=" + r, r, "--name", "run-1", "LR=0.1"}
	}
	for _, tt := range []struct {
		name string
		// args returns gorun's arguments (after argv[0]) and what the
		// record must keep of them, for a job that records into rec,
		// summarizes into sum and runs program (and wantProgram).
		args func(rec, sum string, program, wantProgram []string) (args, want []string)
		got  string // what the rank must have got
	}{
		{"gorun", func(rec, sum string, program, wantProgram []string) ([]string, []string) {
			own := []string{"--record", rec, "--summary-json", sum, "-x", "HF_TOKEN=" + hfToken, "-x", "AWS_SECRET_ACCESS_KEY=" + awsKey,
				"-x=WANDB_API_KEY=" + wandbKey, "--x", "MY_PASSWORD=" + myPass, "--x=GH_THING=" + ghThing, "-x", "OMP_NUM_THREADS=2", "-np", "1"}
			wantOwn := []string{"--record", rec, "--summary-json", sum, "-x", "HF_TOKEN=" + r, "-x", "AWS_SECRET_ACCESS_KEY=" + r,
				"-x=WANDB_API_KEY=" + r, "--x", "MY_PASSWORD=" + r, "--x=GH_THING=" + r, "-x", "OMP_NUM_THREADS=2", "-np", "1"}
			return append(own, program...), append(wantOwn, wantProgram...)
		}, hfToken + "|" + myPass + "|" + ghThing},
		{"mpirun", func(rec, sum string, program, wantProgram []string) ([]string, []string) {
			own := []string{"mpirun", "-x", "HF_TOKEN=" + hfToken, "--x", "MY_PASSWORD=" + myPass, "-np", "1", "--record", rec, "--summary-json", sum}
			wantOwn := []string{"mpirun", "-x", "HF_TOKEN=" + r, "--x", "MY_PASSWORD=" + r, "-np", "1", "--record", rec, "--summary-json", sum}
			return append(own, program...), append(wantOwn, wantProgram...)
		}, hfToken + "|" + myPass + "|"},
		{"mpiexec", func(rec, sum string, program, wantProgram []string) ([]string, []string) {
			own := []string{"mpiexec", "-genv", "HF_TOKEN", hfToken, "-env", "MY_PASSWORD", myPass, "-genv", "GH_THING", ghThing,
				"-n", "1", "--record", rec, "--summary-json", sum}
			wantOwn := []string{"mpiexec", "-genv", "HF_TOKEN", r, "-env", "MY_PASSWORD", r, "-genv", "GH_THING", r,
				"-n", "1", "--record", rec, "--summary-json", sum}
			return append(own, program...), append(wantOwn, wantProgram...)
		}, hfToken + "|" + myPass + "|" + ghThing},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			rec, sum, out := filepath.Join(dir, "rec"), filepath.Join(dir, "summary.json"), filepath.Join(dir, "got")
			program, wantProgram := prog(out)
			args, want := tt.args(rec, sum, program, wantProgram)
			res := runGorun(t, time.Minute, nil, args...)
			if res.code != 0 {
				t.Fatalf("gorun %s: exit %d\n%s%s", strings.Join(args, " "), res.code, res.stdout, res.stderr)
			}
			if got, err := os.ReadFile(out); err != nil || string(got) != tt.got {
				t.Errorf("the rank got %q (%v), want %q: the ranks must get the secrets", got, err, tt.got)
			}

			files := map[string]string{}
			for _, name := range []string{jobrecord.JSONFile, jobrecord.TextFile} {
				b, err := os.ReadFile(filepath.Join(rec, name))
				if err != nil {
					t.Fatal(err)
				}
				files[name] = string(b)
			}
			b, err := os.ReadFile(sum)
			if err != nil {
				t.Fatal(err)
			}
			files["--summary-json"] = string(b)
			show := runGorun(t, time.Minute, nil, "show", "-v", rec)
			showJSON := runGorun(t, time.Minute, nil, "show", "--json", rec)
			if show.code != 0 || showJSON.code != 0 {
				t.Fatalf("gorun show: exit %d, %d\n%s%s", show.code, showJSON.code, show.stderr, showJSON.stderr)
			}
			files["gorun show -v"], files["gorun show --json"] = show.stdout, showJSON.stdout
			for what, text := range files {
				var leaked []string
				for _, s := range secrets {
					if strings.Contains(text, s) {
						leaked = append(leaked, s)
					}
				}
				if len(leaked) > 0 {
					t.Errorf("%s holds the secrets %q:\n%s", what, leaked, text)
				}
			}

			// The shape: every argument in its place.
			var got jobrecord.Record
			if err := json.Unmarshal([]byte(files[jobrecord.JSONFile]), &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Argv) == 0 || !slices.Equal(got.Argv[1:], want) {
				t.Fatalf("record.json's argv:\n%q\nwant (after argv[0])\n%q", got.Argv, want)
			}
			for what, raw := range map[string]string{"--summary-json": files["--summary-json"], "the record's summary": string(got.Summary)} {
				var s struct {
					Argv []string `json:"argv"`
				}
				if err := json.Unmarshal([]byte(raw), &s); err != nil || !slices.Equal(s.Argv, wantProgram) {
					t.Errorf("%s's argv (%v):\n%q\nwant\n%q", what, err, s.Argv, wantProgram)
				}
			}
			command := " " + shellQuote(append([]string{got.Argv[0]}, want...)) + "\n"
			for _, what := range []string{jobrecord.TextFile, "gorun show -v"} {
				if !strings.Contains(files[what], command) {
					t.Errorf("%s's command row is not\n%s%s", what, command, files[what])
				}
			}
		})
	}
}

// shellQuote joins argv as the record's text writes a command: words of
// safe characters as they are, the others in single quotes.
func shellQuote(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,@%+") == "" {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
