package jobrecord

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode"
)

// RedactArgs returns a command line (gorun's os.Args, a program and its
// arguments) with the secrets in it replaced by <redacted>, argument for
// argument: the result has as many arguments as argv, in the same places,
// so that a reader still sees the command's shape (-x HF_TOKEN=<redacted>,
// --api-key <redacted>). It hides:
//   - in a NAME=VALUE argument (gorun's and mpirun's -x NAME=VALUE, a
//     program's DB_PASSWORD=VALUE or Hydra-style model.api_key=VALUE),
//     VALUE as [Redact] hides it in an environment: whole when NAME looks
//     secret or VALUE starts as a well-known token does, else the
//     passwords of the URLs and the tokens in it, and its words by the
//     rules below when it has blanks. NAME is a name: a letter or _, then
//     letters, digits, _, . and - (after any +, ~ or quotes);
//   - after MPICH's -genv NAME VALUE and -env NAME VALUE (one dash or
//     two), VALUE as the value of a variable NAME;
//   - the value of an option whose name looks secret, whole: the next
//     argument (--api-key VALUE, unless it starts with a dash: then the
//     option was a switch) or what follows "=" (--token=VALUE). A name
//     looks secret when, split into words at -, _, . and camelCase
//     (apiKey), a word contains password, passwd, passphrase or secret,
//     ends in token or apikey, is pass, cookie, credential(s), or pwd
//     with another word (--db-pwd), or the last word is key (--key,
//     --api-key, --secret-key, --ssh-key); unless the last word is file,
//     path or dir (--token-file, --password-file: they say where a
//     secret is, not what it is). Only names of two letters or more
//     count, with one dash or two (-password, as Go's flag package
//     spells it, --password): short options are too ambiguous (-p is a
//     port as often as a password) and are kept;
//   - the value of any other --opt=VALUE as an argument of its own, so
//     that -x=NAME=VALUE and --x=NAME=VALUE are read as NAME=VALUE;
//   - in an argument with blanks (a script for sh -c, or -H 'Authorization:
//     Bearer ...' as one argument), each of its words
//     by these rules, as if they were arguments: HF_TOKEN=VALUE,
//     --password VALUE. A script's quotes are not parsed: of a quoted
//     value with blanks (--password 'a b'), only the first word is
//     hidden;
//   - in any other argument, the well-known tokens (hf_..., sk-...,
//     ghp_..., see [Redact]) that start it or follow a character other
//     than a letter, digit, _ or -, and the passwords of URLs; the whole
//     argument when what is left still starts as a token does.
//
// Some arguments are hidden that need not be (--sort-key name,
// TOKENIZERS_PARALLELISM=false): a record with too little is better than
// one with a secret. The input is not changed; RedactArgs(nil) is nil.
// Redacting twice gives what redacting once gives.
func RedactArgs(argv []string) []string {
	if argv == nil {
		return nil
	}
	out := slices.Clone(argv)
	redactArgs(out)
	return out
}

// redactArgs redacts args in place, by [RedactArgs]'s rules.
func redactArgs(args []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !isOption(a) {
			args[i] = redactArg(a)
			continue
		}
		opt, val, hasVal := strings.Cut(a, "=")
		switch {
		case strings.ContainsFunc(opt, unicode.IsSpace): // "-H Authorization: Bearer ..."
			args[i] = redactText(a)
		case hasVal && val != "" && secretOption(opt):
			args[i] = opt + "=" + Redacted
		case hasVal:
			args[i] = opt + "=" + redactArg(val)
		case pairOption(opt) && i+2 < len(args) && isName(args[i+1]) && !isOption(args[i+2]):
			args[i+2] = redactValue(args[i+1], args[i+2])
			i += 2
		case secretOption(opt) && i+1 < len(args) && args[i+1] != "" && !strings.HasPrefix(args[i+1], "-"):
			args[i+1] = Redacted
			i++
		default:
			args[i] = redactTokens(redactURLs(a))
		}
	}
}

// redactArg redacts an argument that is not an option: a NAME=VALUE, a
// text with blanks, or a word.
func redactArg(a string) string {
	if name, val, ok := strings.Cut(a, "="); ok && isName(strings.TrimLeft(name, `+~'"`)) {
		return name + "=" + redactValue(name, val)
	}
	if strings.ContainsFunc(a, unicode.IsSpace) {
		return redactText(a)
	}
	if r := redactTokens(redactURLs(a)); !tokenValue(r) {
		return r
	}
	return Redacted
}

// redactValue redacts v as the value of a variable called name: as
// [Redact] does, and then, where that keeps it, the tokens in it, or its
// words when it has blanks (CMD=python x.py --password V).
func redactValue(name, v string) string {
	switch r := redactVar(name, v); {
	case r == Redacted:
		return r
	case strings.ContainsFunc(v, unicode.IsSpace):
		return redactText(v)
	default:
		return redactTokens(r)
	}
}

// redactText redacts each word (a run of non-blanks) of s as
// [RedactArgs] redacts arguments, and keeps the blanks between them.
func redactText(s string) string {
	var spans [][2]int
	start := -1
	for i, c := range s {
		switch {
		case unicode.IsSpace(c) && start >= 0:
			spans, start = append(spans, [2]int{start, i}), -1
		case !unicode.IsSpace(c) && start < 0:
			start = i
		}
	}
	if start >= 0 {
		spans = append(spans, [2]int{start, len(s)})
	}
	words := make([]string, len(spans))
	for i, sp := range spans {
		words[i] = s[sp[0]:sp[1]]
	}
	redactArgs(words)
	var b strings.Builder
	last := 0
	for i, sp := range spans {
		b.WriteString(s[last:sp[0]])
		b.WriteString(words[i])
		last = sp[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// isOption reports whether a is an option: one dash or two, then a
// letter (-x, --api-key, -genv; not -, --, -1).
func isOption(a string) bool {
	n := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	return len(n) < len(a) && n != "" && (n[0] >= 'a' && n[0] <= 'z' || n[0] >= 'A' && n[0] <= 'Z')
}

// isName reports whether s is a variable's name, as [RedactArgs] reads
// one: a letter or _, then letters, digits, _, . and -.
func isName(s string) bool { return nameRE().MatchString(s) }

var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`) })

// pairOption reports whether opt takes a variable's name and its value as
// two arguments: MPICH's -genv and -env.
func pairOption(opt string) bool {
	n := strings.TrimLeft(opt, "-")
	return n == "genv" || n == "env"
}

// secretOption reports whether the value of option opt ("--api-key",
// "-password") is a secret, by [RedactArgs]'s rules.
func secretOption(opt string) bool {
	name := strings.TrimLeft(opt, "-")
	words := optionWords(name)
	if len(name) < 2 || len(words) == 0 {
		return false
	}
	switch last := words[len(words)-1]; {
	case last == "file" || last == "path" || last == "dir":
		return false
	case last == "key" || strings.HasSuffix(last, "apikey"):
		return true
	}
	for _, w := range words {
		switch {
		case strings.Contains(w, "passw"), strings.Contains(w, "passphrase"), strings.Contains(w, "secret"),
			strings.HasSuffix(w, "token"), w == "pass", w == "cookie", w == "credential", w == "credentials",
			w == "pwd" && len(words) > 1:
			return true
		}
	}
	return false
}

// optionWords splits an option's name into lower-case words: at -, _
// and ., and before an upper-case letter that follows a lower-case one
// or a digit (apiKey: api, key).
func optionWords(name string) []string {
	var words []string
	var w []rune
	prev := rune(0)
	for _, c := range name {
		switch {
		case c == '-' || c == '_' || c == '.':
			if len(w) > 0 {
				words, w = append(words, string(w)), nil
			}
		case unicode.IsUpper(c) && (unicode.IsLower(prev) || unicode.IsDigit(prev)):
			if len(w) > 0 {
				words, w = append(words, string(w)), nil
			}
			w = append(w, unicode.ToLower(c))
		default:
			w = append(w, unicode.ToLower(c))
		}
		prev = c
	}
	if len(w) > 0 {
		words = append(words, string(w))
	}
	return words
}

// tokenRun finds well-known tokens inside a text: a prefix of
// tokenPrefixes after the text's start or a character that cannot be in
// a token, then 16 or more characters that can.
var tokenRun = sync.OnceValue(func() *regexp.Regexp {
	quoted := make([]string, len(tokenPrefixes))
	for i, p := range tokenPrefixes {
		quoted[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`(^|[^A-Za-z0-9_-])(?:` + strings.Join(quoted, "|") + `)[A-Za-z0-9_.+=-]{16,}`)
})

// redactTokens replaces the well-known tokens inside s.
func redactTokens(s string) string {
	return tokenRun().ReplaceAllString(s, "${1}"+Redacted)
}

// redact replaces the record's command lines by redacted copies (see
// [RedactArgs]): Argv, and the argv of Summary when it has one. It
// changes no slice that r shares with another record.
func (r *Record) redact() {
	r.Argv = RedactArgs(r.Argv)
	r.Summary = redactSummary(r.Summary)
}

// redactSummary returns the summary raw (a JSON object) with its "argv"
// redacted; raw itself when there is nothing to redact. The object's
// members come out sorted by name when its argv had to change.
func redactSummary(raw json.RawMessage) json.RawMessage {
	var s map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return raw
	}
	var argv []string
	if json.Unmarshal(s["argv"], &argv) != nil {
		return raw
	}
	red := RedactArgs(argv)
	if slices.Equal(red, argv) {
		return raw
	}
	var err error
	if s["argv"], err = json.Marshal(red); err != nil {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil
	}
	return b
}
