# gorun: build, run, test, bench. `make test` is what CI runs.
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# 1 where Go finds its C compiler (as `go build` itself decides), else 0.
CGO = $(shell command -v "$$($(GO) env CC)" >/dev/null 2>&1 && echo 1 || echo 0)
# Go's default C flags, less the warnings about the NVML functions that
# go-nvml wraps and NVIDIA has deprecated (a screenful on a fresh build),
# for the cgo builds (gorun alone links go-nvml, through topology/nvmllib;
# the flags are harmless for gorun-pmix, the fabric plugin and make
# test-short's).
NVML_CFLAGS := -O2 -g -Wno-deprecated-declarations
# urfave/cli's man and markdown generator, which gorun does not use, left
# out of gorun: its initialisation (blackfriday's) cost 0.4 ms of every
# start of gorun and of each host's agent.
GORUN_TAGS := urfave_cli_no_docs

.PHONY: build plugins install-plugins run test test-short check fuzz bench bench-mpi bench-coll bench-small bench-startcost bench-crossover bench-plugins bench-slurm bench-scale clean

# gorun is built with cgo, so that it has NVML (go-nvml dlopens
# libnvidia-ml.so.1 at run time: no CUDA needed to build), and links
# glibc dynamically; gorun-static next to it (no cgo) is what gorun copies
# to hosts whose glibc is older than gorun needs. Without a C compiler,
# gorun is a static build too, without NVML. Both are the launcher build
# (-tags launcher_only): without Go's collective runtime and the plugin
# host, and so without go-plugin and gRPC, whose initialisation cost every
# gorun process 1.5-2 ms. gorun-tools is the full build (static, so that
# any host runs it), which gorun runs for gorun bench, gorun plugins and
# --plugin-check. gorun-pmix, the PMIx plugin for Open MPI programs, links
# libpmix (libpmix-dev). All sit next to each other.
build: plugins
	@if [ "$(CGO)" = 0 ]; then echo "note: no C compiler ($$($(GO) env CC)): gorun built without cgo, so without NVML"; fi
	CGO_ENABLED=$(CGO) CGO_CFLAGS="$(NVML_CFLAGS)" $(GO) build -tags $(GORUN_TAGS),launcher_only -ldflags "$(LDFLAGS)" -o gorun ./cmd/gorun
	CGO_ENABLED=0 $(GO) build -tags $(GORUN_TAGS),launcher_only -ldflags "$(LDFLAGS)" -o gorun-static ./cmd/gorun
	CGO_ENABLED=0 $(GO) build -tags $(GORUN_TAGS) -ldflags "$(LDFLAGS)" -o gorun-tools ./cmd/gorun
	@if pkg-config --exists pmix 2>/dev/null; then CGO_ENABLED=1 CGO_CFLAGS="$(NVML_CFLAGS)" $(GO) build -o gorun-pmix ./plugins/pmix; \
	else echo "note: libpmix-dev is missing: gorun-pmix (Open MPI support) not built"; fi

# The shipped plugins, into lib/gorun/plugins (gorun --plugin-dir
# lib/gorun/plugins, or make install-plugins). The fabric plugin links
# libfabric (libfabric-dev) with cgo; gorun does not. The CUDA plugin
# uses cgo only to dlopen libcuda.so.1: it builds without CUDA. The example plugins
# in examples/plugins are not shipped: their tests build them.
PLUGIN_DIR := lib/gorun/plugins
plugins:
	@mkdir -p $(PLUGIN_DIR)
	@if pkg-config --exists libfabric 2>/dev/null; then CGO_ENABLED=1 CGO_CFLAGS="$(NVML_CFLAGS)" $(GO) build -o $(PLUGIN_DIR)/gorun-plugin-fabric ./plugins/fabric; \
	else echo "note: libfabric-dev is missing: gorun-plugin-fabric (InfiniBand, RoCE, EFA) not built"; fi
	@if command -v $${CC:-cc} >/dev/null 2>&1; then CGO_ENABLED=1 $(GO) build -o $(PLUGIN_DIR)/gorun-plugin-cuda ./plugins/cuda; \
	else echo "note: no C compiler: gorun-plugin-cuda (NVIDIA GPUs) not built"; fi

# Where every user's gorun finds them without --plugin-dir.
install-plugins: plugins
	mkdir -p $(HOME)/.local/lib/gorun/plugins
	@if ls $(PLUGIN_DIR)/gorun-plugin-* >/dev/null 2>&1; then cp -v $(PLUGIN_DIR)/gorun-plugin-* $(HOME)/.local/lib/gorun/plugins/; \
	else echo "note: no plugin built, nothing installed"; fi

# gorun's main job on this machine: localhost is the default host.
run: build
	./gorun -np 4 hostname

# The whole test suite, on a fresh Debian 12 machine as root.
test: check
	$(GO) test -race -count=1 -timeout 15m ./...
	CGO_ENABLED=0 $(GO) test -count=1 ./topology/... ./env   # the static build: NVML absent, and saying why

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
	CGO_CFLAGS="$(NVML_CFLAGS)" $(GO) test -short ./...

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
