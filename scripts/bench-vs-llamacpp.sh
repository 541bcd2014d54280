#!/usr/bin/env bash
# Runs warden's CPU engine and llama.cpp side by side on the same weights
# (by hand, not in CI; minutes of CPU):
#
#   scripts/bench-vs-llamacpp.sh LLAMA_CPP_SOURCE_DIR [MODEL_DIR]
#
# 1. builds llama.cpp from the given source checkout with its native CPU
#    flags (cmake -DGGML_NATIVE=ON) into LLAMA_CPP_SOURCE_DIR/build-warden;
# 2. writes MODEL_DIR (a safetensors Llama directory; default: warden's
#    `small` preset, generated into a temporary directory in f32, f16 and
#    bf16) as GGUF with warden's own writer (`warden model export-gguf`,
#    the writer the GGUF tests use): one file per element type, plus a
#    Q8_0 file from the f32 weights;
# 3. for 1 and 2 threads, runs llama-bench (flash attention off, f32 KV
#    cache: warden's attention is f32) and `warden bench engine` on the
#    very same GGUF file, interleaved, REPS times each, and prints the
#    median prefill (512 tokens) and batch-1 decode rates and
#    warden/llama.cpp ratios, per format (warden loads the Q8_0 file
#    dequantized and runs it with --quantize q8, against llama.cpp's Q8_0).
#
# Environment: REPS (default 3), PROMPT (512), DECODE (32).
set -euo pipefail
cd "$(dirname "$0")/.."

src=${1:?usage: $0 LLAMA_CPP_SOURCE_DIR [MODEL_DIR]}
src=$(cd "$src" && pwd)
reps=${REPS:-3}
prompt=${PROMPT:-512}
decode=${DECODE:-32}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

log() { printf '== %s\n' "$*" >&2; }

log "building llama.cpp in $src/build-warden"
cmake -S "$src" -B "$src/build-warden" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF >/dev/null
cmake --build "$src/build-warden" -j "$(nproc)" --target llama-bench >/dev/null
bin=$src/build-warden/bin

log "building warden"
go build -o "$work/warden" ./cmd/warden

declare -A dirs
if [[ $# -ge 2 ]]; then
	dirs[file]=$2
else
	for dt in f32 f16 bf16; do
		log "generating the small preset in $dt"
		"$work/warden" model init --out "$work/small-$dt" --preset small --dtype "$dt" --seed 1 >/dev/null
		dirs[$dt]=$work/small-$dt
	done
fi

# median prints the median of its arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# warden_rates MODEL THREADS [QUANTIZE] (MODEL: a directory or .gguf file): "prefill_tps decode_tps".
warden_rates() {
	"$work/warden" bench engine --model-dir "$1" --threads "$2" --prompt "$prompt" --decode "$decode" \
		--batch 1 --quantize "${3:-file}" --bandwidth-bytes $((64 << 20)) |
		awk -F'|' '/^\| prefill /{split($3,a," "); p=a[1]} /^\| decode, batch 1 /{split($3,a," "); d=a[1]} END {print p, d}'
}

# llama_rates GGUF THREADS: "prefill_tps decode_tps".
llama_rates() {
	"$bin/llama-bench" -m "$1" -t "$2" -p "$prompt" -n "$decode" -fa 0 -ctk f32 -ctv f32 -r 1 -o csv 2>/dev/null |
		awk -F, 'NR==1 {for (i=1;i<=NF;i++) {gsub(/"/,"",$i); col[$i]=i}; next}
			{gsub(/"/,""); if ($col["n_prompt"]>0) p=$col["avg_ts"]; else d=$col["avg_ts"]} END {print p, d}'
}

printf '| model | threads | warden prefill t/s | llama.cpp prefill t/s | ratio | warden decode t/s | llama.cpp decode t/s | ratio |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for name in "${!dirs[@]}"; do
	dir=${dirs[$name]}
	log "writing $name as GGUF with warden model export-gguf"
	"$work/warden" model export-gguf --model-dir "$dir" --dtype "$([[ $name == file ]] && echo f16 || echo "$name")" \
		--out "$work/$name.gguf" >/dev/null
	variants=("$name:file:$work/$name.gguf")
	if [[ $name == f32 || $name == file ]]; then
		"$work/warden" model export-gguf --model-dir "$dir" --dtype q8_0 --out "$work/$name-q8_0.gguf" >/dev/null
		variants+=("$name→q8_0:q8:$work/$name-q8_0.gguf")
	fi
	for v in "${variants[@]}"; do
		IFS=: read -r label quant gguf <<<"$v"
		for threads in 1 2; do
			wp=() wd=() lp=() ld=()
			for ((r = 0; r < reps; r++)); do
				read -r p d < <(warden_rates "$gguf" "$threads" "$quant")
				wp+=("$p") wd+=("$d")
				read -r p d < <(llama_rates "$gguf" "$threads")
				lp+=("$p") ld+=("$d")
			done
			mwp=$(median "${wp[@]}") mwd=$(median "${wd[@]}") mlp=$(median "${lp[@]}") mld=$(median "${ld[@]}")
			awk -v n="$label" -v t="$threads" -v a="$mwp" -v b="$mlp" -v c="$mwd" -v d="$mld" \
				'BEGIN {printf "| %s | %d | %.1f | %.1f | %.2f× | %.2f | %.2f | %.2f× |\n", n, t, a, b, a/b, c, d, c/d}'
		done
	done
done
