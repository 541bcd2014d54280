#!/usr/bin/env bash
# helm.sh: prints the path of a helm binary at the pinned version, built
# from source through the Go module proxy into a cache outside the
# repository (helm has no Debian package; the module proxy's checksum
# database verifies the source). Built once, then reused; concurrent
# callers wait on a lock. The cache is $XDG_CACHE_HOME/warden-test/helm-VERSION,
# else $HOME/.cache/warden-test/helm-VERSION. deploy/helm's tests use it
# (scripts/test.sh exports it as WARDEN_HELM).
set -euo pipefail

version=v3.19.0
dir="${XDG_CACHE_HOME:-$HOME/.cache}/warden-test/helm-$version"
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [[ ! -x "$dir/helm" ]]; then
  echo "helm.sh: building helm $version (once; a few minutes)" >&2
  # The flags helm's Makefile sets: its version, and the Kubernetes
  # version of its client libraries (1.34 for v3.19), which lint and
  # template assume for .Capabilities and the chart's kubeVersion.
  ldflags="-X helm.sh/helm/v3/internal/version.version=$version"
  for pkg in pkg/lint/rules pkg/chartutil; do
    ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=34"
  done
  # Outside the repository, so that warden's go.mod plays no part.
  (cd "$dir" && GOBIN="$dir" GOFLAGS=-mod=mod go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$version")
fi
echo "$dir/helm"
