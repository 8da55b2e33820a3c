package jobrecord

import (
	"slices"
	"testing"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		// Names that say secret.
		{"GORUN_JOB_SECRET=0123456789abcdef", "GORUN_JOB_SECRET=<redacted>"},
		{"GORUN_AGENT_KEY=deadbeef", "GORUN_AGENT_KEY=<redacted>"},
		{"AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI", "AWS_SECRET_ACCESS_KEY=<redacted>"},
		{"HF_TOKEN=hf_abc", "HF_TOKEN=<redacted>"},
		{"wandb_api_key=abc", "wandb_api_key=<redacted>"},
		{"PGPASSWORD=hunter2", "PGPASSWORD=<redacted>"},
		{"MYSQL_PWD=hunter2", "MYSQL_PWD=<redacted>"},
		{"SMTP_PASS=hunter2", "SMTP_PASS=<redacted>"},
		{"SENTRY_DSN=https://abc@o1.ingest.sentry.io/1", "SENTRY_DSN=<redacted>"},
		{"AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountKey=abc", "AZURE_STORAGE_CONNECTION_STRING=<redacted>"},
		{"GITLAB_PAT=glpat", "GITLAB_PAT=<redacted>"},
		{"XAUTHORITY=/run/user/1000/xauth", "XAUTHORITY=<redacted>"},
		{"SSH_PRIVATE_KEY_FILE=/k", "SSH_PRIVATE_KEY_FILE=<redacted>"},
		{"GORUN_PLUGIN_COOKIE=x", "GORUN_PLUGIN_COOKIE=<redacted>"},
		{"KRB5_CREDENTIALS=x", "KRB5_CREDENTIALS=<redacted>"},
		// Names that do not.
		{"PWD=/home/me", "PWD=/home/me"},
		{"OLDPWD=/tmp", "OLDPWD=/tmp"},
		{"PATH=/usr/bin:/bin", "PATH=/usr/bin:/bin"},
		{"LD_LIBRARY_PATH=/opt/lib", "LD_LIBRARY_PATH=/opt/lib"},
		{"PASSAGE=1", "PASSAGE=1"},
		{"COMPASS_DIR=/c", "COMPASS_DIR=/c"},
		{"GORUN_PMIX_PLUGIN=/usr/lib/gorun/gorun-pmix", "GORUN_PMIX_PLUGIN=/usr/lib/gorun/gorun-pmix"},
		{"EMPTY_TOKEN=", "EMPTY_TOKEN="},
		// Values that are well-known tokens, whatever the name.
		{"MY_THING=ghp_0123456789abcdefABCDEF0123456789abcd", "MY_THING=<redacted>"},
		{"X=AKIAIOSFODNN7EXAMPLE", "X=<redacted>"},
		{"X=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "X=<redacted>"},
		{"X=sk-short", "X=sk-short"},
		{"X=hf_home_is_/a/dir/not/a/token", "X=hf_home_is_/a/dir/not/a/token"},
		// Passwords in URLs.
		{"HTTPS_PROXY=http://alice:s3cret@proxy:3128", "HTTPS_PROXY=http://alice:<redacted>@proxy:3128"},
		{"PIP_INDEX_URL=https://__token__:pypi-AgEI@pypi.example/simple", "PIP_INDEX_URL=https://__token__:<redacted>@pypi.example/simple"},
		{"REPO=https://ghp_0123456789abcdefABCDEF@github.com/o/r", "REPO=https://<redacted>@github.com/o/r"},
		{"REPO=ssh://git@github.com/o/r", "REPO=ssh://git@github.com/o/r"},
		{"URLS=https://a:b@x/ https://c:d@y/", "URLS=https://a:<redacted>@x/ https://c:<redacted>@y/"},
		{"MAILTO=me@example.com", "MAILTO=me@example.com"},
		{"WEIRD=https://Not%20A%20Login:p@h", "WEIRD=https://<redacted>:<redacted>@h"},
		// Not NAME=VALUE.
		{"garbage", "garbage"},
	} {
		got := Redact([]string{tt.in})
		if len(got) != 1 || got[0] != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	in := []string{"A_TOKEN=x", "B=y"}
	Redact(in)
	if !slices.Equal(in, []string{"A_TOKEN=x", "B=y"}) {
		t.Errorf("Redact changed its input: %q", in)
	}
}
