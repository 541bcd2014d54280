#!/usr/bin/env bash
# Compile-checks the cuda backend on a machine without a GPU:
#
#   scripts/cuda-compile-check.sh           install the toolkit if missing, then check
#   scripts/cuda-compile-check.sh install   only install the toolkit
#
# The toolkit is Debian bookworm's CUDA 11.8 from the non-free section
# (nvcc and ptxas, cuda.h, and libcuda1 for linking; the binaries need
# only libcuda.so.1, which a GPU machine's driver provides). The sources
# entry lives in a temporary list, so the machine's apt configuration is
# left alone.
#
# The checks, in order:
#   1. the default build has no CUDA dependency (gorgonia.org/cu is not
#      linked without -tags cuda);
#   2. go vet -tags cuda ./worker/cuda/... ./worker/runtime/...
#   3. go build -tags cuda ./...
#   4. the cuda test binaries link: go test -tags cuda -c;
#   5. the committed PTX (worker/cuda/ptx) matches the kernels' sources and
#      assembles (ptxas) for sm_80 and sm_90.
# Running the binaries needs a GPU: scripts/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*" >&2; }

install_toolkit() {
	if command -v nvcc >/dev/null && [[ -e /usr/include/cuda.h || -e /usr/local/cuda/include/cuda.h ]] &&
		ldconfig -p | grep -q 'libcuda\.so\b'; then
		return 0
	fi
	log "installing CUDA 11.8 from Debian non-free (nvidia-cuda-toolkit, nvidia-cuda-dev, libcuda1)"
	local sudo="" list
	[[ $(id -u) -eq 0 ]] || sudo="sudo"
	list=$(mktemp)
	trap 'rm -f "$list"' RETURN
	echo 'deb http://deb.debian.org/debian bookworm main contrib non-free' >"$list"
	local apt=(-o "Dir::Etc::SourceList=$list" -o "Dir::Etc::SourceParts=/dev/null")
	$sudo apt-get "${apt[@]}" update -q >/dev/null
	DEBIAN_FRONTEND=noninteractive $sudo apt-get "${apt[@]}" install -y -q --no-install-recommends \
		nvidia-cuda-toolkit nvidia-cuda-dev libcuda1 >/dev/null
	nvcc --version | tail -1
}

install_toolkit
[[ ${1:-} == install ]] && exit 0

log "default build links no CUDA"
deps=$(go list -deps ./... 2>/dev/null || true)
if grep -q '^gorgonia.org/cu' <<<"$deps"; then
	echo "gorgonia.org/cu is a dependency of the default build (it must stay behind -tags cuda)" >&2
	exit 1
fi

log "go vet -tags cuda"
go vet -tags cuda ./worker/cuda/... ./worker/runtime/...

log "go build -tags cuda ./..."
go build -tags cuda ./...

log "cuda test binaries"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -tags cuda -c -o "$tmp/cuda.test" ./worker/cuda
go test -tags cuda -c -o "$tmp/runtime.test" ./worker/runtime

log "PTX up to date and assembling for sm_80 and sm_90"
mkdir -p "$tmp/ptx"
for cu in worker/cuda/kernels/*.cu; do
	name=$(basename "$cu" .cu)
	for arch in 80 90; do
		nvcc --ptx -O3 -std=c++17 -arch="compute_$arch" -Iworker/cuda/kernels -o "$tmp/ptx/$name.sm_$arch.ptx" "$cu"
		if ! cmp -s "$tmp/ptx/$name.sm_$arch.ptx" "worker/cuda/ptx/$name.sm_$arch.ptx"; then
			echo "worker/cuda/ptx/$name.sm_$arch.ptx is stale: run scripts/gen-ptx.sh" >&2
			exit 1
		fi
		ptxas -arch="sm_$arch" -O3 -o /dev/null "worker/cuda/ptx/$name.sm_$arch.ptx"
	done
done
log "cuda compile check passed"
