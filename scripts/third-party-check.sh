#!/usr/bin/env bash
# third-party-check.sh - holds the two modules that go.mod replaces with
# third_party/ to their upstreams (docs/building.md, "go install and make
# build"), and shows that a cold build of gorun's C parts is silent:
#
#   third_party/go-nvml    go-nvml at the version go.mod requires: its
#                          pkg/nvml and pkg/dl less their tests and mocks,
#                          go.mod, go.sum and LICENSE, byte for byte, but
#                          for third_party/go-nvml.patch (one #cgo line).
#   third_party/go-md2man  a stand-in with the one function urfave/cli
#                          calls (md2man.Render), with upstream's signature.
#
# Upstream comes from the Go module proxy (go mod download). `make test`
# runs it; after a version bump in go.mod, this script says what to redo.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
fail() { echo "third-party-check: $*" >&2; exit 1; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

# The version go.mod requires, and that its replace line names.
need() { # module: the version required, which a replace line must name
  local v
  v=$(go list -m -f '{{.Version}}' "$1") || fail "go list -m $1"
  grep -qE "^replace $1 $v => \./third_party/" go.mod ||
    fail "go.mod requires $1 $v but its replace line names another version: refresh third_party (this script's header says how it is made)"
  echo "$v"
}
updir() { # module@version: its upstream tree, from the module proxy
  local out
  out=$(cd "$W" && go mod download -json "$1" 2>&1) ||
    fail "go mod download $1 (the upstream to compare with; it needs the Go module proxy once): $(echo "$out" | sed -n 's/^\t"Error": //p' | head -1)"
  echo "$out" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

# go-nvml: upstream's files, chosen as third_party/go-nvml was, patched.
nv=$(need github.com/NVIDIA/go-nvml)
up=$(updir "github.com/NVIDIA/go-nvml@$nv") || exit 1
[ -d "$up" ] || fail "go mod download github.com/NVIDIA/go-nvml@$nv gave no tree"
want=$W/go-nvml
mkdir -p "$want/pkg"
cp "$up/go.mod" "$up/go.sum" "$up/LICENSE" "$want/"
for d in nvml dl; do
  mkdir "$want/pkg/$d"
  find "$up/pkg/$d" -maxdepth 1 -type f ! -name '*_test.go' -exec cp {} "$want/pkg/$d/" \;
done
chmod -R u+w "$want"
(cd "$want" && git apply --unsafe-paths "$ROOT/third_party/go-nvml.patch") ||
  fail "third_party/go-nvml.patch does not apply to go-nvml $nv"
diff -r "$want" third_party/go-nvml >"$W/diff" ||
  fail "third_party/go-nvml is not go-nvml $nv with third_party/go-nvml.patch:
$(head -40 "$W/diff")"

# go-md2man: the stand-in keeps upstream's signature of what urfave/cli calls.
md=$(need github.com/cpuguy83/go-md2man/v2)
up=$(updir "github.com/cpuguy83/go-md2man/v2@$md") || exit 1
sig='func Render(doc []byte) []byte'
grep -qF "$sig" "$up/md2man/md2man.go" || fail "go-md2man $md has no '$sig'"
grep -qF "$sig" third_party/go-md2man/md2man/md2man.go || fail "third_party/go-md2man lacks '$sig'"
cli=$(go list -m -f '{{.Dir}}' github.com/urfave/cli/v2)
calls=$(grep -ho 'md2man\.[A-Za-z_]*' "$cli"/*.go | sort -u)
[ "$calls" = "md2man.Render" ] || fail "urfave/cli calls more of go-md2man than the stand-in has: $calls"
go list -deps ./cmd/... | grep -q '^github.com/russross/blackfriday' && fail "gorun links blackfriday after all"

# A cold build of the cgo packages prints nothing (the C compiler's
# warnings were some 150 lines of go-nvml's).
if command -v "$(go env CC)" >/dev/null 2>&1; then
  out=$(GOCACHE=$W/cache CGO_ENABLED=1 go build -o /dev/null ./cmd/gorun 2>&1) || fail "go build ./cmd/gorun: $out"
  [ -z "$out" ] || fail "a cold go build ./cmd/gorun printed $(echo "$out" | wc -l) lines:
$(echo "$out" | head -20)"
fi
echo "third-party-check: go-nvml $nv (patched), go-md2man $md (stand-in): as upstream; a cold build is silent"
