#!/usr/bin/env bash
# install-check.sh - `make install` into a scratch DESTDIR, and the tree it
# makes checked: exactly the files expected (gorun and its companions, the
# plugins this machine could build, the man pages, the bash and zsh
# completions) with their modes, `man gorun` finds the page, the
# completions parse, and the installed gorun runs a job and finds its
# companion and the installed plugins. `make test` runs it (and CI with it).
#
# Usage: scripts/install-check.sh        (from anywhere; make install-check)
# Env:   PREFIX (default /usr/local), KEEP=1 keeps the scratch tree.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
DEST=$(mktemp -d)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$DEST"' EXIT
fail() { echo "install-check: $*" >&2; exit 1; }

make -C "$ROOT" --no-print-directory install DESTDIR="$DEST" PREFIX="$PREFIX" >"$DEST.log" 2>&1 ||
  { cat "$DEST.log" >&2; rm -f "$DEST.log"; fail "make install DESTDIR=$DEST PREFIX=$PREFIX failed"; }
rm -f "$DEST.log"
P=$DEST$PREFIX

# Exactly these files, with these modes: what this machine can build.
want=("755 bin/gorun" "755 bin/gorun-tools" "755 bin/gorun-static"
  "644 share/man/man1/gorun.1" "644 share/man/man5/gorun-hostfile.5" "644 share/man/man7/gorun-plugin.7"
  "644 share/bash-completion/completions/gorun" "644 share/zsh/site-functions/_gorun")
pkg-config --exists pmix 2>/dev/null && want+=("755 bin/gorun-pmix")
pkg-config --exists libfabric 2>/dev/null && want+=("755 lib/gorun/plugins/gorun-plugin-fabric")
command -v "${CC:-cc}" >/dev/null 2>&1 && want+=("755 lib/gorun/plugins/gorun-plugin-cuda")
got=$(cd "$DEST" && find . -type f -printf '%m %P\n' | sort)
exp=$(for w in "${want[@]}"; do echo "${w%% *} ${PREFIX#/}/${w#* }"; done | sort)
[ "$got" = "$exp" ] || fail "the installed tree differs from what make install should make:
$(diff <(echo "$exp") <(echo "$got") || true)"

# man gorun finds the installed page, and it renders.
if command -v man >/dev/null; then
  page=$(man -M "$P/share/man" -w gorun) || fail "man -M $P/share/man -w gorun found no page"
  [ "$page" = "$P/share/man/man1/gorun.1" ] || fail "man -w gorun gives $page"
  MANWIDTH=80 man -M "$P/share/man" gorun 2>&1 | grep -q '^NAME' || fail "man gorun does not render"
  man -M "$P/share/man" -w 7 gorun-plugin >/dev/null || fail "man 7 gorun-plugin found no page"
fi

# The completions parse, and load as the shells load them.
bash -n "$P/share/bash-completion/completions/gorun" || fail "bash -n rejects the bash completion"
bash -c "source '$P/share/bash-completion/completions/gorun' && complete -p gorun" >/dev/null || fail "the bash completion does not register for gorun"
head -1 "$P/share/zsh/site-functions/_gorun" | grep -qx '#compdef gorun' || fail "_gorun does not start with #compdef gorun"
if command -v zsh >/dev/null; then
  zsh -n "$P/share/zsh/site-functions/_gorun" || fail "zsh -n rejects _gorun"
fi

# The installed gorun runs a job, and finds its companion (of its own
# build) and the plugins installed.
cd "$DEST"
out=$("$P/bin/gorun" -np 2 --tag-output echo installed) || fail "the installed gorun cannot run a job"
[ "$(echo "$out" | grep -c installed)" = 2 ] || fail "the installed gorun's job printed: $out"
"$P/bin/gorun" plugins list --plugin-dir "$P/lib/gorun/plugins" >"$DEST/plugins.txt" 2>&1 ||
  fail "the installed gorun plugins list failed: $(cat "$DEST/plugins.txt")"
for p in "$P"/lib/gorun/plugins/gorun-plugin-*; do
  [ -f "$p" ] || continue
  grep -q "$p" "$DEST/plugins.txt" || fail "gorun plugins list does not show $p: $(cat "$DEST/plugins.txt")"
done
echo "install-check: make install DESTDIR=... PREFIX=$PREFIX installs $(echo "$got" | wc -l) files, as expected"
