#!/usr/bin/env bash
# The cuda backend's GPU check, in two phases (docs/cuda.md):
#
#   scripts/gpu-check.sh build   here, with Go: builds the cuda test binaries
#                                and a cuda warden into .gpucheck/ (git-ignored,
#                                well under the device tool's 64 MiB carry)
#   scripts/gpu-check.sh run     on the GPU machine, without Go: runs every
#                                check of docs/cuda.md's coverage table in
#                                steps (kernels; equivalence with the cpu
#                                backend per family, f16/bf16 and q8;
#                                engine: prefix cache, sealed pages, masks,
#                                logprobs, n > 1; runtime; 1B benchmark),
#                                each under its own timeout and all within
#                                GPU_CHECK_BUDGET seconds (default 420), and
#                                writes one Markdown table, report.md
#
# With the device tool: run with carry [".gpucheck"], the command
# "scripts/gpu-check.sh run" and timeout_s 480 (the budget plus the
# binaries' start). The report is rewritten after every step, into
# .gpucheck/out/ and $OUT when that is set, so a run cut short still
# returns what it measured. The run phase exits non-zero when a step
# failed or timed out.
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
	{ grep -E "$2" "$1" 2>/dev/null || true; } | head -1 | awk -v u="$3" '{for (i = 2; i <= NF; i++) if ($i == u) {print $(i-1); exit}}'
}

# verdict TEST: PASS, FAIL or "not run" for a top-level test, from the
# logs report read into $all.
verdict() {
	if [[ $all == *$'\n'"--- FAIL: $1 ("* ]]; then echo FAIL
	elif [[ $all == *$'\n'"--- PASS: $1 ("* ]]; then echo PASS
	else echo "not run"; fi
}

# marks TAG [GREP_ARGS...]: the test log lines tagged TAG (EQUIV, KERNEL,
# …), without the tag, those GREP_ARGS select, joined with "; ".
marks() {
	local tag=$1
	shift
	{ grep -oE "$tag .*" <<<"$all" || true; } | sed "s/^$tag //" |
		{ if (($#)); then grep "$@" || true; else cat; fi; } | paste -sd ';' - | sed 's/;/; /g'
}

# step NAME LIMIT DIR CMD...: runs CMD in DIR (a test binary in its
# package's directory, as go test would: tests read testdata there) under
# timeout min(LIMIT, budget left), its output in $out/NAME.log, records the
# outcome and rewrites the report.
step() {
	local name=$1 limit=$2 wd=$3 left rc=0 t
	shift 3
	left=$((budget - (SECONDS - t0)))
	if ((left < 10)); then
		steps+="$name skipped (budget spent); "
		status=1
		report
		return
	fi
	((limit <= left)) || limit=$left
	log "$name (timeout ${limit}s)"
	t=$SECONDS
	(cd "$wd" && timeout -k 5 "$limit" "$@") >"$out/$name.log" 2>&1 || rc=$?
	case $rc in
	0) steps+="$name ok $((SECONDS - t))s; " ;;
	124 | 137) steps+="$name TIMEOUT after ${limit}s; "; status=1 ;;
	*) steps+="$name FAILED (exit $rc) $((SECONDS - t))s; "; status=1 ;;
	esac
	grep -E '^--- |^(ok|FAIL|PASS)$|^Benchmark|(KERNEL|EQUIV|PREFIX|VIOLATION|MASKS|CHOICES) ' "$out/$name.log" || true
	report
}

# report writes the results table from the logs so far.
report() {
	local b=$out/bench.log r=$out/report.md all done=${steps%; }
	all=$'\n'$(cat "$out"/*.log 2>/dev/null)
	{
		echo "| check | result |"
		echo "|---|---|"
		echo "| GPU | $gpu |"
		echo "| date | $(date -u +%Y-%m-%dT%H:%M:%SZ) |"
		echo "| build | $(head -1 "$dir/BUILD_INFO") |"
		echo "| steps (budget ${budget}s) | ${done:-none yet} |"
		echo "| kernel tests | $(verdict TestLinear) linear (f32, f16, bf16, q8), $(verdict TestEmbed) embed, $(verdict TestRMSNorm) rmsnorm, $(verdict TestQKVPrep) qkv_prep, $(verdict TestArgmax) argmax, $(verdict TestRopeKVAttention) rope+kv+attention, $(verdict TestTagsAndFill) tags/fill |"
		echo "| kernel max relative errors | $(marks KERNEL) |"
		echo "| greedy equivalence with cpu, every family (Llama f32/f16, Llama/Mistral/Qwen2/Qwen3 bf16; logits and logprobs) | $(verdict TestGreedyMatchesCPU): $(marks EQUIV -v '^q8/') |"
		echo "| q8 weights vs the cpu q8 backend (teacher-forced greedy tokens, logits, top-5 logprobs) | $(verdict TestQ8MatchesCPU): $(marks EQUIV '^q8/') |"
		echo "| determinism (batch and chunk invariance, Greedy = argmax) | $(verdict TestBatchInvariance) |"
		echo "| LoRA adapters: base + 3 adapters in one batch = cpu backend, every family; bit-identical alone and in a mixed batch | $(verdict TestLoRAMatchesCPU) / $(verdict TestLoRABatchInvariance) |"
		echo "| engine via worker/runtime (file weights and q8) | $(verdict TestCUDARuntimeMatchesCPU) |"
		echo "| prefix cache on the device: hits equal misses | $(verdict TestPrefixCacheHitsEqualMisses) $(marks PREFIX) |"
		echo "| sealed-page violation caught (domain / chain-hash bit flipped in the device tag, foreign domain presented, sealed page written or read as owned) | $(verdict TestSealedPageChecksOnDevice) |"
		echo "| owner-tag violation caught | device kernels $(verdict TestDeviceOwnerCheck); backend (corrupt tag, foreign page, unwritten slot) $(verdict TestOwnerViolation) |"
		echo "| token masks: schema-valid, alone = batched = cpu engine; logprobs vs cpu | $(verdict TestMaskedRequestsOnDevice) $(marks MASKS) |"
		echo "| n > 1 from one prefill (with and without the prefix cache) = single requests = cpu | $(verdict TestChoicesOnDevice) |"
		echo "| page copies / pool fill / bad input | $(verdict TestPageCopies) / $(verdict TestPoolFill) / $(verdict TestBadInput) |"
		echo "| prefill (1024-token prompt, bf16) | $(field "$b" 'Llama1B/prefill' tok/s) tokens/s |"
		echo "| decode, batch 1, bf16 | $(field "$b" 'Llama1B/decode1-|Llama1B/decode1\s' tok/s) tokens/s, $(field "$b" 'Llama1B/decode1-|Llama1B/decode1\s' weight_GB/tok) GB read per token |"
		echo "| decode, batch 1, q8 | $(field "$b" 'Llama1B/decode1_q8' tok/s) tokens/s, $(field "$b" 'Llama1B/decode1_q8' weight_GB/tok) GB read per token |"
		echo "| device copy bandwidth (read + write) | $(field "$b" 'Llama1B/decode1' copy_GB/s) GB/s |"
		echo "| decode % of copy-bandwidth roofline (target ≥ 60%) | bf16 $(field "$b" 'Llama1B/decode1-|Llama1B/decode1\s' pct_roofline) %, q8 $(field "$b" 'Llama1B/decode1_q8' pct_roofline) % |"
	} >"$r"
	if [[ -n ${OUT:-} && -d ${OUT:-} ]]; then
		cp "$out"/*.log "$r" "$OUT"/ 2>/dev/null || true
	fi
}

run() {
	for f in cuda.test runtime.test warden.gz; do
		[[ -e $dir/$f ]] || { echo "gpu-check: $dir/$f missing: run 'scripts/gpu-check.sh build' first and carry $dir" >&2; exit 1; }
	done
	local bin=$PWD/$dir
	out=$bin/out
	budget=${GPU_CHECK_BUDGET:-420}
	t0=$SECONDS status=0 steps=""
	rm -rf "$out"
	mkdir -p "$out"
	gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
	gpu=${gpu:-unknown (nvidia-smi failed)}
	log "GPU: $gpu; build: $(tr '\n' ' ' <"$dir/BUILD_INFO")"
	gzip -dc "$dir/warden.gz" >"$out/warden"
	chmod +x "$out/warden"
	local t=(-test.v -test.count 1)
	step warden 15 . "$out/warden" version
	step kernels 60 worker/cuda "$bin/cuda.test" "${t[@]}" -test.timeout 60s \
		-test.run '^(TestLinear|TestEmbed|TestRMSNorm|TestQKVPrep|TestArgmax|TestRopeKVAttention|TestTagsAndFill|TestDeviceOwnerCheck)$'
	step equivalence 75 worker/cuda "$bin/cuda.test" "${t[@]}" -test.timeout 75s \
		-test.run '^(TestGreedyMatchesCPU|TestQ8MatchesCPU|TestBatchInvariance|TestLoRAMatchesCPU|TestLoRABatchInvariance|TestHiddenMatchesCPU|TestOwnerViolation|TestPageCopies|TestPoolFill|TestBadInput)$'
	step engine 90 worker/cuda "$bin/cuda.test" "${t[@]}" -test.timeout 90s \
		-test.run '^(TestPrefixCacheHitsEqualMisses|TestSealedPageChecksOnDevice|TestMaskedRequestsOnDevice|TestChoicesOnDevice)$'
	step runtime 45 worker/runtime "$bin/runtime.test" "${t[@]}" -test.timeout 45s -test.run CUDA
	step bench 150 worker/cuda "$bin/cuda.test" -test.run '^$' -test.bench BenchmarkLlama1B -test.benchtime 2s -test.timeout 150s -test.v
	echo
	cat "$out/report.md"
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
