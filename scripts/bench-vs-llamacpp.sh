#!/usr/bin/env bash
# Runs warden's CPU engine and llama.cpp side by side on the same GGUF
# files (by hand, not in CI; many minutes of CPU):
#
#   scripts/bench-vs-llamacpp.sh [WORK_DIR]
#
# 1. writes warden's `small` preset (seed 1) in f32, f16 and bf16 as GGUF
#    with warden's own writer (`warden model export-gguf`, the writer the
#    GGUF tests use), plus a Q8_0 file from the f32 weights, into WORK_DIR
#    (default: a temporary directory);
# 2. installs node-llama-cpp (NODE_LLAMA_CPP_VERSION, default 3.22.1) from
#    the npm registry into WORK_DIR/llama: its prebuilt llama.cpp CPU
#    backend picks the variant for the machine's instruction set at load
#    (on an AVX-512 machine an AVX-512 build), and scripts/llamacpp-bench.mjs
#    drives it with warden's benchmark prompt (flash attention off, f32 KV
#    cache: warden's attention is f32);
# 3. with LLAMA_CPP_SRC set to a llama.cpp source checkout (for example
#    the release node-llama-cpp ships as a git bundle:
#    `git clone WORK_DIR/llama/node_modules/node-llama-cpp/llama/gitRelease.bundle SRC`),
#    builds its llama-bench there with the machine's native flags
#    (GGML_NATIVE, -march=native) into SRC/build-native, and times
#    llama.cpp with llama-bench (flash attention off; its KV cache stays
#    f16, as llama-bench takes no f32 cache: half the attention bytes
#    warden's f32 cache reads, an advantage to llama.cpp);
#    without it, times the prebuilt build through llamacpp-bench.mjs;
# 4. for 1 and 2 threads, runs `warden bench engine` and llama.cpp on the
#    very same file, interleaved, REPS times each, and prints the median
#    prefill (PROMPT tokens, one batch) and batch-1 decode rates, the
#    warden/llama.cpp ratios, and whether the greedy ids of the decode
#    agree (llama.cpp's ids always come from llamacpp-bench.mjs; warden
#    loads the Q8_0 file dequantized and runs it with --quantize q8,
#    against llama.cpp's Q8_0).
#
# Environment: REPS (default 3), PROMPT (512), DECODE (32), THREADS ("1 2"),
# FORMATS ("f32 f16 bf16 q8_0"; FILE:DTYPE, e.g. bf16:f16, runs warden on
# FILE's GGUF converted at load to DTYPE, `warden bench engine --dtype`,
# as a worker with worker.dtype, and llama.cpp on the same file; bf16:dot
# runs the bf16 file with bf16 products, `--numerics bf16`, as
# worker.numerics bf16),
# LLAMA_CPP_SRC (unset).
set -euo pipefail
cd "$(dirname "$0")/.."

reps=${REPS:-3}
prompt=${PROMPT:-512}
decode=${DECODE:-32}
threads_list=${THREADS:-1 2}
formats=${FORMATS:-f32 f16 bf16 q8_0}
work=${1:-$(mktemp -d)}
mkdir -p "$work"

log() { printf '== %s\n' "$*" >&2; }

log "building warden"
go build -o "$work/warden" ./cmd/warden

if [[ ! -d $work/llama/node_modules/node-llama-cpp ]]; then
	log "installing node-llama-cpp into $work/llama"
	mkdir -p "$work/llama"
	(cd "$work/llama" && npm install --no-audit --no-fund --ignore-scripts \
		"node-llama-cpp@${NODE_LLAMA_CPP_VERSION:-3.22.1}" >/dev/null)
fi
cp scripts/llamacpp-bench.mjs "$work/llama/"

llama_bench=
if [[ -n ${LLAMA_CPP_SRC:-} ]]; then
	llama_bench=$(scripts/build-llamacpp.sh "$LLAMA_CPP_SRC" llama-bench)
	log "llama.cpp: $llama_bench ($(git -C "$LLAMA_CPP_SRC" describe --tags --always 2>/dev/null || echo unknown))"
fi

for f in $formats; do
	f=${f%%:*}
	src=$f
	[[ $f == q8_0 ]] && src=f32
	if [[ ! -f $work/small-$src/config.json ]]; then
		log "generating the small preset in $src"
		"$work/warden" model init --out "$work/small-$src" --preset small --dtype "$src" --seed 1 >/dev/null
	fi
	if [[ ! -f $work/small-$f.gguf ]]; then
		log "writing small-$f.gguf with warden model export-gguf"
		"$work/warden" model export-gguf --model-dir "$work/small-$src" --dtype "$f" --out "$work/small-$f.gguf" >/dev/null
	fi
done

# median prints the median of its arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# warden_run GGUF THREADS QUANTIZE DTYPE NUMERICS: "prefill_tps decode_tps ids" (ids comma-separated).
warden_run() {
	"$work/warden" bench engine --model-dir "$1" --threads "$2" --prompt "$prompt" --decode "$decode" \
		--batch 2 --quantize "$3" --dtype "$4" --numerics "$5" --bandwidth-bytes $((64 << 20)) |
		awk -F'|' '/^\| prefill /{split($3,a," "); p=a[1]}
			/^\| decode, batch 1 /{split($3,a," "); d=a[1]}
			/^\| greedy ids/{ids=$3; gsub(/^ +| +$/,"",ids); gsub(/ +/,",",ids)}
			END {print p, d, ids}'
}

# llama_run GGUF THREADS: "prefill_tps decode_tps ids" from the prebuilt
# llama.cpp.
llama_run() {
	(cd "$work/llama" && node llamacpp-bench.mjs "$1" "$2" "$prompt" "$decode") |
		node -e 'const r=JSON.parse(require("fs").readFileSync(0,"utf8")); console.log(r.prefill_tps, r.decode_tps, r.ids.join(","))'
}

# llama_bench_run GGUF THREADS: "prefill_tps decode_tps" from the native
# llama-bench (one repetition: the script interleaves its own).
llama_bench_run() {
	"$llama_bench" -m "$1" -t "$2" -p "$prompt" -n "$decode" -r 1 -fa 0 -o json 2>/dev/null |
		node -e 'const r=JSON.parse(require("fs").readFileSync(0,"utf8"));
			const ts=(f)=>r.find(f).avg_ts;
			console.log(ts(t=>t.n_prompt>0&&t.n_gen===0), ts(t=>t.n_gen>0&&t.n_prompt===0))'
}

printf '| file | threads | warden prefill t/s | llama.cpp prefill t/s | ratio | warden decode t/s | llama.cpp decode t/s | ratio | greedy ids equal |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for row in $formats; do
	f=${row%%:*} dtype=auto
	[[ $row == *:* ]] && dtype=${row#*:}
	numerics=exact
	[[ $dtype == dot ]] && dtype=auto numerics=bf16
	quant=file
	[[ $f == q8_0 ]] && quant=q8
	gguf=$work/small-$f.gguf
	for threads in $threads_list; do
		wp=() wd=() lp=() ld=()
		same=yes
		for ((r = 0; r < reps; r++)); do
			read -r p d wids < <(warden_run "$gguf" "$threads" "$quant" "$dtype" "$numerics")
			wp+=("$p") wd+=("$d")
			if [[ -n $llama_bench ]]; then
				# The ids once per row, from the same llama.cpp release.
				((r == 0)) && read -r _ _ lids < <(llama_run "$gguf" "$threads")
				read -r p d < <(llama_bench_run "$gguf" "$threads")
			else
				read -r p d lids < <(llama_run "$gguf" "$threads")
			fi
			lp+=("$p") ld+=("$d")
			log "$row t$threads rep $r: prefill warden ${wp[-1]} llama.cpp ${lp[-1]}; decode warden ${wd[-1]} llama.cpp ${ld[-1]}"
			log "$row t$threads rep $r: warden ids $wids; llama.cpp ids $lids"
			[[ $wids == "$lids" ]] || same=no
		done
		mwp=$(median "${wp[@]}") mwd=$(median "${wd[@]}") mlp=$(median "${lp[@]}") mld=$(median "${ld[@]}")
		awk -v n="$row" -v t="$threads" -v a="$mwp" -v b="$mlp" -v c="$mwd" -v d="$mld" -v s="$same" \
			'BEGIN {printf "| %s | %d | %.1f | %.1f | %.2f× | %.2f | %.2f | %.2f× | %s |\n", n, t, a, b, a/b, c, d, c/d, s}'
	done
done
