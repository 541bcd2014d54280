#!/usr/bin/env bash
# The cuda backend's GPU check, in two phases (docs/cuda.md):
#
#   scripts/gpu-check.sh build   here, with Go: builds the cuda test binaries
#                                and a cuda warden into .gpucheck/ (git-ignored,
#                                well under the device tool's 64 MiB carry)
#   scripts/gpu-check.sh run     on the GPU machine, without Go: runs them
#                                (kernel tests, cpu equivalence, prefix cache,
#                                owner-tag and sealed-page violations,
#                                runtime, 1B benchmark) and prints
#                                one Markdown table; about 2-4 minutes on an H200
#
# With the device tool: run with carry [".gpucheck"] and the command
# "scripts/gpu-check.sh run". The run phase exits non-zero when a test
# fails; its logs are copied to $OUT when that is set.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.gpucheck

log() { printf '\n== %s\n' "$*" >&2; }

build() {
	scripts/cuda-compile-check.sh install
	rm -rf "$dir"
	mkdir -p "$dir"
	log "building cuda test binaries and warden into $dir"
	go test -tags cuda -c -ldflags='-s -w' -o "$dir/cuda.test" ./worker/cuda
	go test -tags cuda -c -ldflags='-s -w' -o "$dir/runtime.test" ./worker/runtime
	go build -tags cuda -ldflags='-s -w' -o "$dir/warden" ./cmd/warden
	gzip -9 -n "$dir/warden" # the largest file: carried compressed
	{
		echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo none)$(git diff --quiet 2>/dev/null || echo '+dirty')"
		echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
		echo "go: $(go version)"
	} >"$dir/BUILD_INFO"
	local size
	size=$(du -sb "$dir" | cut -f1)
	du -ah "$dir" >&2
	if ((size > 60 * 1024 * 1024)); then
		echo "gpu-check: $dir is $size bytes, over the carry budget" >&2
		exit 1
	fi
	log "built; on the GPU machine run: scripts/gpu-check.sh run"
}

# field LOG PATTERN UNIT: the number before UNIT on the first line of LOG
# matching PATTERN (benchmark metrics).
field() {
	{ grep -E "$2" "$1" || true; } | head -1 | awk -v u="$3" '{for (i = 2; i <= NF; i++) if ($i == u) {print $(i-1); exit}}'
}

# verdict LOG TEST: PASS, FAIL or "not run" for a top-level test.
verdict() {
	if grep -q -- "^--- FAIL: $2\b" "$1"; then echo FAIL
	elif grep -q -- "^--- PASS: $2\b" "$1"; then echo PASS
	else echo "not run"; fi
}

run() {
	for f in cuda.test runtime.test warden.gz; do
		[[ -e $dir/$f ]] || { echo "gpu-check: $dir/$f missing: run 'scripts/gpu-check.sh build' first and carry $dir" >&2; exit 1; }
	done
	local out=$dir/out status=0
	mkdir -p "$out"
	local gpu
	gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
	gpu=${gpu:-unknown (nvidia-smi failed)}
	log "GPU: $gpu; build: $(tr '\n' ' ' <"$dir/BUILD_INFO")"

	log "warden (cuda build) starts"
	gzip -dc "$dir/warden.gz" >"$out/warden"
	chmod +x "$out/warden"
	"$out/warden" version >"$out/warden.log" 2>&1 || status=1
	cat "$out/warden.log"

	log "kernel, equivalence, prefix-cache and owner-check tests"
	timeout 240 "$dir/cuda.test" -test.v -test.count 1 -test.timeout 230s >"$out/cuda-tests.log" 2>&1 || status=1
	grep -E '^(=== RUN|--- |\s+\S+_test.go:.*(KERNEL|EQUIV|PREFIX|VIOLATION))|^(ok|FAIL|PASS)' "$out/cuda-tests.log" | grep -v '=== RUN' || true

	log "runtime: cuda pool sizing and engine equivalence"
	timeout 120 "$dir/runtime.test" -test.v -test.count 1 -test.run CUDA -test.timeout 110s >"$out/runtime-tests.log" 2>&1 || status=1
	grep -E '^--- |^(ok|FAIL|PASS)' "$out/runtime-tests.log" || true

	log "benchmark: ~1.1B-parameter bfloat16 model, prefill and batch-1 decode"
	timeout 300 "$dir/cuda.test" -test.run '^$' -test.bench BenchmarkLlama1B -test.benchtime 3s \
		-test.timeout 290s -test.v >"$out/bench.log" 2>&1 || status=1
	grep -E '^Benchmark|bench_test.go' "$out/bench.log" || true

	local c=$out/cuda-tests.log kernels equiv
	kernels=$({ grep -oE 'KERNEL [^ ]+ max_rel_err=[^ ]+' "$c" || true; } | sed 's/KERNEL //; s/ max_rel_err=/ /' |
		awk '{printf "%s%s %s", sep, $1, $2; sep="; "}')
	equiv="$(verdict "$c" TestGreedyMatchesCPU) ($({ grep -oE 'EQUIV [^ ]+ tokens=[0-9]+ max_logit_rel_diff=[^ ]+( max_logprob_abs_diff=[^ ]+)?' "$c" || true; } |
		sed 's/EQUIV //' | paste -sd ';' -)); batch invariance $(verdict "$c" TestBatchInvariance); engine via runtime $(verdict "$out/runtime-tests.log" TestCUDARuntimeMatchesCPU)"
	local b=$out/bench.log
	local report=$out/report.md
	{
		echo "| check | result |"
		echo "|---|---|"
		echo "| GPU | $gpu |"
		echo "| date | $(date -u +%Y-%m-%dT%H:%M:%SZ) |"
		echo "| build | $(head -1 "$dir/BUILD_INFO") |"
		echo "| kernel tests | $(verdict "$c" TestLinear) linear, $(verdict "$c" TestEmbed) embed, $(verdict "$c" TestRMSNorm) rmsnorm, $(verdict "$c" TestArgmax) argmax, $(verdict "$c" TestRopeKVAttention) rope+kv+attention, $(verdict "$c" TestTagsAndFill) tags/fill |"
		echo "| kernel max relative errors | ${kernels:-none reported} |"
		echo "| greedy equivalence with cpu | $equiv |"
		echo "| owner-tag violation caught | device kernels $(verdict "$c" TestDeviceOwnerCheck); backend (corrupt tag, foreign page, unwritten slot) $(verdict "$c" TestOwnerViolation) |"
		echo "| prefix cache on the device: hits equal misses | $(verdict "$c" TestPrefixCacheHitsEqualMisses) |"
		echo "| sealed-page violation caught (domain / chain-hash bit flipped in the device tag, foreign domain presented, sealed page written or read as owned) | $(verdict "$c" TestSealedPageChecksOnDevice) |"
		echo "| page copies / pool fill / bad input | $(verdict "$c" TestPageCopies) / $(verdict "$c" TestPoolFill) / $(verdict "$c" TestBadInput) |"
		echo "| prefill (1024-token prompt) | $(field "$b" 'Llama1B/prefill' tok/s) tokens/s |"
		echo "| decode, batch 1 | $(field "$b" 'Llama1B/decode1' tok/s) tokens/s |"
		echo "| weight bytes per decode token | $(field "$b" 'Llama1B/decode1' weight_GB/tok) GB |"
		echo "| device copy bandwidth (read + write) | $(field "$b" 'Llama1B/decode1' copy_GB/s) GB/s |"
		echo "| decode % of copy-bandwidth roofline (target ≥ 60%) | $(field "$b" 'Llama1B/decode1' pct_roofline) % |"
	} >"$report"
	echo
	cat "$report"
	if [[ -n ${OUT:-} && -d ${OUT:-} ]]; then
		cp "$out"/*.log "$out"/report.md "$OUT"/
	fi
	if ((status != 0)); then
		echo "gpu-check: FAILED (logs in $out)" >&2
	fi
	return $status
}

case ${1:-} in
build) build ;;
run) run ;;
*)
	echo "usage: scripts/gpu-check.sh build|run" >&2
	exit 2
	;;
esac
