#!/usr/bin/env bash
# Measures what warden's isolation checks cost end to end (DESIGN §8: at
# most 2% of tokens/s). It builds warden with the benchmark-only tag
# warden_nochecks, in which `warden bench pd` can switch the recurring
# checks (the KV owner-tag verification before every forward step and the
# transfer checksums) off between rounds of one process, and runs the P/D
# benchmark: a gateway in front of a prefill and a decode worker, the tiny
# model (the worst case: the least compute per check), greedy chat
# requests, every answer checked. Rounds with the checks on and off
# alternate, so machine load drifts over both alike.
#
#   scripts/bench-isolation.sh [bench pd flags, e.g. --duration 60s --transfer shm]
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
go build -tags warden_nochecks -o "$tmp/warden" ./cmd/warden
"$tmp/warden" bench pd "$@"
