#!/usr/bin/env bash
# Cache walkthrough: fill a private kernel cache, inspect it with kfuse-cache, and show that a
# second process compiles nothing. Usage: cache_walkthrough.sh <kfuse_cache_walkthrough> <kfuse-cache>
set -euo pipefail
prog=${1:?path to kfuse_cache_walkthrough}
tool=${2:?path to kfuse-cache}
export KFUSE_CACHE_DIR
KFUSE_CACHE_DIR=$(mktemp -d)/kfuse-cache
trap 'rm -rf "$(dirname "$KFUSE_CACHE_DIR")"' EXIT

echo "== first process: compiles and stores the kernels"
"$prog"
echo "== kfuse-cache list"
"$tool" list
echo "== kfuse-cache stats"
"$tool" stats
key=$("$tool" list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["entries"][0]["key"])')
echo "== kfuse-cache show $key (first lines)"
"$tool" show "$key" | sed -n 1,40p  # (not head: under pipefail, head closing the pipe fails show)
echo "== kfuse-cache verify"
"$tool" verify
echo "== second process: everything comes from the disk cache"
out=$("$prog")
echo "$out"
echo "$out" | grep -q "this process: 0 kernels compiled" || { echo "FAIL: the second process compiled kernels"; exit 1; }
echo "PASS"
