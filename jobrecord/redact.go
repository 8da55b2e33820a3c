package jobrecord

import (
	"regexp"
	"strings"
	"sync"
)

// Redacted replaces what [Redact] hides.
const Redacted = "<redacted>"

// secretWords are the parts of a variable's name that make its value a
// secret: a name that contains one, in any case, is redacted whole
// (AWS_SECRET_ACCESS_KEY, HF_TOKEN, PGPASSWORD, WANDB_API_KEY,
// XAUTHORITY, GORUN_JOB_SECRET, GORUN_AGENT_KEY, GORUN_PLUGIN_COOKIE).
// Some names are redacted that need not be (GIT_AUTHOR_NAME,
// SSH_AUTH_SOCK): a record with too little is better than one with a
// secret.
var secretWords = []string{"KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "AUTH", "COOKIE", "PRIVATE", "SIGNATURE"}

// secretParts are the parts of a name, between underscores, that make
// its value a secret; too short or too common to look for inside words
// (SMTP_PASS, MYSQL_PWD, SENTRY_DSN, GITLAB_PAT, AZURE_STORAGE_SAS, and
// Azure's ..._CONNECTION_STRING that holds the account key). PWD and
// OLDPWD alone are directories.
var secretParts = []string{"PASS", "PWD", "DSN", "PAT", "SAS", "CONNECTION_STRING", "CONNSTR"}

// tokenPrefixes start the values of well-known tokens, whatever the
// variable's name: GitHub's, GitLab's, Hugging Face's, OpenAI's and
// Anthropic's, Slack's, npm's, AWS's and Google's access keys, and JSON web
// tokens.
var tokenPrefixes = []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "hf_", "sk-", "xoxb-", "xoxp-", "xoxa-", "xoxr-", "npm_", "AKIA", "ASIA", "AIza", "eyJ"}

// urlUserinfo finds the user information of URLs in a value: scheme://,
// a user, and maybe :password, before an @.
var urlUserinfo = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)([^/?#@\s:]*)(:[^/?#@\s]*)?@`)
})

// loginName is a user name that [Redact] keeps in a URL without a
// password (ssh://git@host): lower-case, short, as useradd takes them.
var loginName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z_][a-z0-9_.-]{0,31}$`) })

// Redact returns env ("NAME=VALUE" strings) with secrets replaced by
// <redacted>:
//   - the whole value of a variable whose name looks secret: it contains
//     KEY, SECRET, TOKEN, PASSWORD, PASSWD, PASSPHRASE, CREDENTIAL, AUTH,
//     COOKIE, PRIVATE or SIGNATURE, in any case, or has PASS, PWD, DSN,
//     PAT, SAS, CONNECTION_STRING or CONNSTR as a part between
//     underscores (not PWD and OLDPWD themselves);
//   - the whole value where it starts as a well-known token does (ghp_,
//     hf_, sk-, AKIA, eyJ...), whatever the name;
//   - in URLs anywhere in a value, the password (https://user:<redacted>@host)
//     and a user name without a password unless it looks like a login
//     (git@ stays; a token used as the user, https://<redacted>@host, goes).
//
// Entries without "=" are kept as they are. The input is not changed.
func Redact(env []string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		if name, val, ok := strings.Cut(kv, "="); ok {
			out[i] = name + "=" + redactVar(name, val)
		} else {
			out[i] = kv
		}
	}
	return out
}

// redactVar returns the value val of a variable called name as [Redact]
// leaves it.
func redactVar(name, val string) string {
	switch {
	case val == "":
		return val
	case secretName(name) || tokenValue(val):
		return Redacted
	}
	return redactURLs(val)
}

// secretName reports whether a variable of this name holds a secret.
func secretName(name string) bool {
	up := strings.ToUpper(name)
	for _, w := range secretWords {
		if strings.Contains(up, w) {
			return true
		}
	}
	if up == "PWD" || up == "OLDPWD" {
		return false
	}
	for _, p := range secretParts {
		if up == p || strings.HasPrefix(up, p+"_") || strings.HasSuffix(up, "_"+p) || strings.Contains(up, "_"+p+"_") {
			return true
		}
	}
	return false
}

// tokenValue reports whether v starts as a well-known token does.
func tokenValue(v string) bool {
	for _, p := range tokenPrefixes {
		if strings.HasPrefix(v, p) && len(v) >= len(p)+16 && !strings.ContainsAny(v, " /:") {
			return true
		}
	}
	return false
}

// redactURLs hides the user information of the URLs in v: a password, or
// a user that does not look like a login.
func redactURLs(v string) string {
	if !strings.Contains(v, "://") || !strings.Contains(v, "@") {
		return v
	}
	return urlUserinfo().ReplaceAllStringFunc(v, func(m string) string {
		s := urlUserinfo().FindStringSubmatch(m)
		scheme, user, pass := s[1], s[2], s[3]
		switch {
		case pass != "":
			if !loginName().MatchString(user) {
				user = Redacted
			}
			return scheme + user + ":" + Redacted + "@"
		case user != "" && !loginName().MatchString(user):
			return scheme + Redacted + "@"
		}
		return m
	})
}
