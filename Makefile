# gorun: build, run, test, bench, install. `make test` is what CI runs;
# docs/building.md says what each program is and how it is built.
GO ?= go
# 1 where Go finds its C compiler (as `go build` itself decides), else 0.
CGO = $(shell command -v "$$($(GO) env CC)" >/dev/null 2>&1 && echo 1 || echo 0)
# `go install ./cmd/...` builds gorun and gorun-tools from the same
# packages with the same flags as these lines: no build tag, no C flag.
# go.mod's replace lines bring in the two modules in third_party/ that
# make that so (docs/building.md).
GOBUILD = $(GO) build

# make install's layout (DESTDIR for staged installs, as packagers do).
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR = $(PREFIX)/bin
PLUGINDIR = $(PREFIX)/lib/gorun/plugins
MANDIR = $(PREFIX)/share/man
BASHCOMPDIR = $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR = $(PREFIX)/share/zsh/site-functions

.PHONY: build gorun gorun-static gorun-tools gorun-pmix plugins install install-plugins install-check run test test-short check fuzz bench bench-mpi bench-coll bench-small bench-startcost bench-crossover bench-plugins bench-slurm bench-scale clean

# The programs, by role, side by side (see docs/building.md):
#   gorun         the launcher: head, agent, bind step (cgo, for NVML)
#   gorun-tools   its companion: gorun bench's ranks, the plugin host of
#                 gorun plugins and --plugin-check (static: it runs on any
#                 host gorun stages it to)
#   gorun-static  gorun without cgo, which gorun stages to hosts whose
#                 glibc is older than its own
#   gorun-pmix    the PMIx server for Open MPI programs (libpmix-dev)
# and the shipped plugins in lib/gorun/plugins. `go install ./cmd/...`
# gives the first two, as these lines build them.
build: gorun gorun-tools gorun-static gorun-pmix plugins

gorun:
	@if [ "$(CGO)" = 0 ]; then echo "note: no C compiler ($$($(GO) env CC)): gorun built without cgo, so without NVML"; fi
	CGO_ENABLED=$(CGO) $(GOBUILD) -o gorun ./cmd/gorun

gorun-tools:
	CGO_ENABLED=0 $(GOBUILD) -o gorun-tools ./cmd/gorun-tools

gorun-static:
	CGO_ENABLED=0 $(GOBUILD) -o gorun-static ./cmd/gorun

# A program that cannot be built here is removed, so that no stale one is
# installed or staged.
gorun-pmix:
	@if pkg-config --exists pmix 2>/dev/null; then CGO_ENABLED=1 $(GO) build -o gorun-pmix ./plugins/pmix; \
	else rm -f gorun-pmix; echo "note: libpmix-dev is missing: gorun-pmix (Open MPI support) not built"; fi

# The shipped plugins, into lib/gorun/plugins (gorun --plugin-dir
# lib/gorun/plugins, or make install). The fabric plugin links libfabric
# (libfabric-dev) with cgo; gorun does not. The CUDA plugin uses cgo only
# to dlopen libcuda.so.1: it builds without CUDA. The example plugins in
# examples/plugins are not shipped: their tests build them.
PLUGIN_DIR := lib/gorun/plugins
plugins:
	@mkdir -p $(PLUGIN_DIR)
	@if pkg-config --exists libfabric 2>/dev/null; then CGO_ENABLED=1 $(GO) build -o $(PLUGIN_DIR)/gorun-plugin-fabric ./plugins/fabric; \
	else rm -f $(PLUGIN_DIR)/gorun-plugin-fabric; echo "note: libfabric-dev is missing: gorun-plugin-fabric (InfiniBand, RoCE, EFA) not built"; fi
	@if command -v $${CC:-cc} >/dev/null 2>&1; then CGO_ENABLED=1 $(GO) build -o $(PLUGIN_DIR)/gorun-plugin-cuda ./plugins/cuda; \
	else rm -f $(PLUGIN_DIR)/gorun-plugin-cuda; echo "note: no C compiler: gorun-plugin-cuda (NVIDIA GPUs) not built"; fi

# gorun, its companions, the plugins built, the man pages and the shell
# completions, under $(DESTDIR)$(PREFIX). gorun finds the plugins in
# /usr/local/lib/gorun/plugins and /usr/lib/gorun/plugins by itself; under
# another PREFIX, name the directory in GORUN_PLUGIN_PATH.
install: build
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man7 \
		$(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR)
	install -m 755 gorun gorun-tools gorun-static $(DESTDIR)$(BINDIR)/
	@if [ -f gorun-pmix ]; then echo 'install -m 755 gorun-pmix $(DESTDIR)$(BINDIR)/'; install -m 755 gorun-pmix $(DESTDIR)$(BINDIR)/; fi
	@for p in $(PLUGIN_DIR)/gorun-plugin-*; do [ -f "$$p" ] || continue; echo "install -m 755 $$p $(DESTDIR)$(PLUGINDIR)/"; install -m 755 "$$p" $(DESTDIR)$(PLUGINDIR)/; done
	install -m 644 man/gorun.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 man/gorun-hostfile.5 $(DESTDIR)$(MANDIR)/man5/
	install -m 644 man/gorun-plugin.7 $(DESTDIR)$(MANDIR)/man7/
	./gorun completion bash > $(DESTDIR)$(BASHCOMPDIR)/gorun
	./gorun completion zsh > $(DESTDIR)$(ZSHCOMPDIR)/_gorun
	@case "$(PREFIX)" in /usr|/usr/local) ;; *) echo "note: gorun looks for plugins in $(PLUGINDIR) only with GORUN_PLUGIN_PATH=$(PLUGINDIR)";; esac

# The plugins alone, where every user's gorun finds them without
# --plugin-dir (~/.local/lib/gorun/plugins).
install-plugins: plugins
	mkdir -p $(HOME)/.local/lib/gorun/plugins
	@if ls $(PLUGIN_DIR)/gorun-plugin-* >/dev/null 2>&1; then cp -v $(PLUGIN_DIR)/gorun-plugin-* $(HOME)/.local/lib/gorun/plugins/; \
	else echo "note: no plugin built, nothing installed"; fi

# make install into a scratch DESTDIR, and the tree it makes checked
# (scripts/install-check.sh): part of make test.
install-check:
	./scripts/install-check.sh

# gorun's main job on this machine: localhost is the default host. It
# builds gorun alone, which that job needs.
run: gorun
	./gorun -np 4 hostname

# The whole test suite, on a fresh Debian 12 machine as root.
test: check
	$(GO) test -race -count=1 -timeout 18m ./...
	CGO_ENABLED=0 $(GO) test -count=1 ./topology/... ./env   # the static build: NVML absent, and saying why
	./scripts/install-check.sh
	./scripts/third-party-check.sh

check:
	./scripts/test-deps.sh
	@fmt=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$fmt" ]; then echo "gofmt: $$fmt"; exit 1; fi
	$(GO) vet ./...
	CGO_ENABLED=0 $(GO) build ./...

# The quick tier, for contributors: what runs without root in a minute or
# two (no check, so it installs nothing). Under -short the tests that need
# root or a fixture cluster (testhosts, slurmtest, throwaway users) skip,
# even as root, and so do the slow ones (building the plugins or
# gorun-pmix, PyTorch, scripts/gpu-check.sh, large messages, hundreds of
# ranks), each saying why; tests that need a missing tool skip too.
# `make test` runs them all, and with CI set -short skips nothing.
test-short:
	$(GO) test -short ./...

# Every fuzz test for a while, one after another (their seeds also run in
# `make test`): go list finds the packages and go test -list their fuzz
# tests, so a new fuzz test needs no line here.
FUZZTIME ?= 30s
fuzz:
	@for p in $$($(GO) list ./...); do \
		fs=$$($(GO) test -list 'Fuzz.*' $$p) || { echo "$$fs" >&2; exit 1; }; \
		for f in $$(echo "$$fs" | grep '^Fuzz'); do \
			echo "== $$p $$f"; \
			$(GO) test -run=NONE -fuzz="^$$f\$$" -fuzztime=$(FUZZTIME) $$p || exit 1; \
		done; \
	done

bench:
	./bench/launch.sh

# An MPI hello job under gorun, mpiexec.hydra and Open MPI's mpirun (root for its ssh part).
bench-mpi:
	./bench/mpi.sh

# Allreduce busbw of gorun bench, Open MPI, MPICH and gloo, 1 host and netns hosts,
# with memcpy/TCP limits (root for the fake hosts).
bench-coll:
	./bench/coll.sh

# The time of one 4 KiB allreduce on this host, Open MPI against gorun builds
# side by side (GORUNS="before=BIN after=BIN"), 2 and 4 ranks.
bench-small:
	./bench/small.sh

bench-startcost:
	./bench/startcost.sh

# The crossover sizes of gorun's collective algorithms (root for the fake hosts).
bench-crossover:
	./bench/crossover.sh

# Allreduce busbw and 4 KiB latency through plugins/fabric (tcp provider) and
# examples/plugins/tcpexample against the built-in TCP transport, across 2 netns hosts (root).
bench-plugins: build
	./bench/plugins.sh

# gorun -N 1 true across 2 nodes of a real Slurm cluster on this machine
# (root; OLD=another gorun compares it side by side).
# gorun's head at 16 to 4,096 simulated hosts x 8 ranks, flat and with the tree:
# launch, fence, failure to stop, teardown, head RSS and CPU; a table and an
# SVG in bench/results/scale-DATE (bench/scale_sweep.sh, bench/scale.sh).
bench-scale:
	./bench/scale_sweep.sh

bench-slurm:
	./bench/slurm.sh

clean:
	rm -rf gorun gorun-static gorun-tools gorun-pmix lib bench/.bin bench/results
