package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/gorun/gorun/config"
)

// completion prints a completion script for shell.
func completion(w io.Writer, shell string) error {
	var words []string
	for _, s := range settings {
		words = append(words, s.names()...)
	}
	words = append(words, "--help", "--version")
	switch shell {
	case "bash":
		fmt.Fprintf(w, `# bash completion for gorun; load with: source <(gorun completion bash)
_gorun() {
    local cur prev
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    case "$prev" in
        --hostfile|--machinefile|--summary-json) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --output-filename|--plugin-dir|--record|--wdir) COMPREPLY=($(compgen -d -- "$cur")); return ;;
        --map-by) COMPREPLY=($(compgen -W "slot node ppr:1:node" -- "$cur")); return ;;
        --bind-to) COMPREPLY=($(compgen -W "gpu core numa package none" -- "$cur")); return ;;
        --gpu-bind) COMPREPLY=($(compgen -W "all single" -- "$cur")); return ;;
        %s) return ;;
    esac
    if [[ $COMP_CWORD -eq 1 && "$cur" != -* ]]; then
        COMPREPLY=($(compgen -W "check show topo bench plugins config completion" -- "$cur") $(compgen -c -- "$cur"))
    elif [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "%s" -- "$cur"))
    else
        COMPREPLY=($(compgen -c -- "$cur") $(compgen -f -- "$cur"))
    fi
}
complete -F _gorun gorun
`, strings.Join(valueFlags(), "|"), strings.Join(words, " "))
	case "zsh":
		fmt.Fprintln(w, "#compdef gorun\n# zsh completion for gorun; load with: source <(gorun completion zsh), or put it in fpath as _gorun\n_gorun() {\n  _arguments -s \\")
		for _, s := range settings {
			desc := strings.NewReplacer("[", "(", "]", ")", "`", "", "'", "").Replace(s.usage)
			names := s.names()
			val := ""
			if s.kind != config.Bool {
				val = ":" + strings.ToLower(s.arg) + ":"
				switch s.name {
				case "hostfile", "summary-json":
					val += "_files"
				case "output-filename", "record", "wdir":
					val += "_files -/"
				case "map-by":
					val += "(slot node ppr\\:1\\:node)"
				case "bind-to":
					val += "(gpu core numa package none)"
				case "gpu-bind":
					val += "(all single)"
				default:
					val += " "
				}
			}
			rep := ""
			if s.kind == config.StringList {
				rep = "*"
			}
			for _, n := range names {
				fmt.Fprintf(w, "    '%s%s[%s]%s' \\\n", rep, n, desc, val)
			}
		}
		fmt.Fprint(w, "    '--help[show help]' '--version[print the version]' \\\n    '(-)1:program:_command_names -e' '*::arguments:_normal'\n}\n"+
			// Autoloaded from fpath (make install's _gorun), this file is
			// the function's body: complete now. Sourced, register it.
			"if [[ $funcstack[1] == _gorun ]]; then _gorun \"$@\"; else compdef _gorun gorun; fi\n")
	default:
		return errExit{code: 2, err: fmt.Errorf("completion %q: want bash or zsh", shell)}
	}
	return nil
}

// valueFlags lists the flags that take a value, as bash case patterns.
func valueFlags() []string {
	var out []string
	for _, s := range settings {
		if s.kind == config.Bool {
			continue
		}
		out = append(out, s.names()...)
	}
	return out
}
