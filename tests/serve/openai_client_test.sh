#!/usr/bin/env bash
# OpenAI's official `openai` npm client against `seqtape serve`'s /v1/completions and /v1/models
# (ctest OpenAiClient.*; tests/CMakeLists.txt passes the paths):
#
#   tests/serve/openai_client_test.sh SEQTAPE_BINARY NPM_DIR [MODE]
#
# Installs the pinned client into NPM_DIR once (reused when present), serves datasets/f15 on
# 127.0.0.1 at a free port, and runs tests/serve/openai_client_test.mjs: completions, streamed
# and not, must give the texts `seqtape generate --json` gives. MODE "keys" serves with
# --api-key-file and also checks that the client's wrong key is refused (401).
# Exit codes: 0 pass, 1 fail, 77 skip (the npm registry cannot be reached).
set -euo pipefail
seqtape=$1
npm_dir=$(realpath -m "$2")
mode=${3:-plain}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=5.23.2  # the client version this test pins (no dependencies of its own)
model=$root/datasets/f15/checkpoint.bin

installed=$(node -p "try { require('$npm_dir/node_modules/openai/package.json').version } catch { '' }")
if [ "$installed" != "$version" ]; then
  if ! timeout 30 npm ping >/dev/null 2>&1; then
    echo "SKIP: the npm registry cannot be reached (npm ping failed), so openai@$version cannot be installed"
    exit 77
  fi
  mkdir -p "$npm_dir"
  timeout 90 npm install --prefix "$npm_dir" "openai@$version" --no-audit --no-fund --no-save \
    --loglevel=error
fi

tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# The texts the client must get: generate's, greedy and sampled.
expect() { "$seqtape" generate --model "$model" --json --max-new 8 "$@"; }
{
  expect --input 我爱
  expect --input 我
  expect --input 学习 --sample --temperature 0.8 --seed 7
} > "$tmp/expected.jsonl"

serve_args=(--model "$model" --host 127.0.0.1 --port 0 --drain-ms 0)
if [ "$mode" = keys ]; then
  printf '# test keys\nsk-first\nsk-seqtape-test\n' > "$tmp/keys"
  serve_args+=(--api-key-file "$tmp/keys")
fi
"$seqtape" serve "${serve_args[@]}" > "$tmp/serve.out" 2> "$tmp/serve.err" &
server_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -n 's/^port \([0-9]*\)$/\1/p' "$tmp/serve.out")
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "FAIL: seqtape serve did not print its port"; cat "$tmp/serve.out" "$tmp/serve.err"; exit 1
fi
timeout 60 node "$here/openai_client_test.mjs" "$npm_dir" "http://127.0.0.1:$port/v1" \
  "$tmp/expected.jsonl" "$mode"
