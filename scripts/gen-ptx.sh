#!/usr/bin/env bash
# Compiles the cuda backend's kernels (worker/cuda/kernels/*.cu) to PTX for
# sm_80 (Ampere and Ada) and sm_90 (Hopper) into worker/cuda/ptx/, where
# worker/cuda embeds them. The generated files are committed, so building
# with -tags cuda needs no nvcc; run this after editing a kernel:
#
#   go generate -tags cuda ./worker/cuda     (or scripts/gen-ptx.sh)
#
# Needs nvcc (CUDA 11.8 or later; scripts/cuda-compile-check.sh installs it).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/worker/cuda/kernels"
out="$root/worker/cuda/ptx"
nvcc=${NVCC:-nvcc}

if ! command -v "$nvcc" >/dev/null; then
	echo "gen-ptx: nvcc not found (run scripts/cuda-compile-check.sh to install CUDA 11.8)" >&2
	exit 1
fi

mkdir -p "$out"
rm -f "$out"/*.ptx
for cu in "$src"/*.cu; do
	name=$(basename "$cu" .cu)
	for arch in 80 90; do
		# -O3 device code, no debug or line info (the output must not depend
		# on the checkout's path).
		"$nvcc" --ptx -O3 -std=c++17 -arch="compute_$arch" -I"$src" \
			-o "$out/$name.sm_$arch.ptx" "$cu"
	done
done
ls -l "$out"
