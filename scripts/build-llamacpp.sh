#!/usr/bin/env bash
# build-llamacpp.sh SRC TARGET: builds TARGET (llama-bench, llama-server) of
# the llama.cpp source checkout SRC with the machine's native flags
# (GGML_NATIVE) into SRC/build-native, unless it is built already, and
# prints the binary's path. The side-by-side benchmark scripts use it.
set -euo pipefail
src=$1 target=$2
bin=$src/build-native/bin/$target
if [[ ! -x $bin ]]; then
	echo "== building $target in $src/build-native (native flags; many minutes)" >&2
	cmake -S "$src" -B "$src/build-native" -DCMAKE_BUILD_TYPE=Release \
		-DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON >/dev/null
	cmake --build "$src/build-native" -j "$(nproc)" --target "$target" >/dev/null
fi
echo "$bin"
