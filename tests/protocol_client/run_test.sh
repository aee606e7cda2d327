#!/usr/bin/env bash
# The ctest entry of the second client (issue 16): compiles the wire schema
# with capnp-es, then runs the node:test suite against the dispatcher binary.
# Skips (exit 77) only when Node.js is missing; scripts/bootstrap.sh installs
# it and scripts/test.sh installs this package's pinned modules (npm ci).
# usage: run_test.sh REPO_ROOT OUT_DIR DISPATCHER_BINARY
set -euo pipefail
root=$1
out=$2
binary=$3
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1; then
  echo "SKIPPED: the protocol client test needs Node.js (node >= 18), which is not installed;" \
       "scripts/bootstrap.sh installs it"
  exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
  echo "protocol client: node $(node --version) is too old: it needs node >= 18 (node:test, top-level await)" >&2
  exit 1
fi
if [ ! -x "$here/node_modules/.bin/capnpc-js" ]; then
  echo "protocol client: $here/node_modules is missing; installing the pinned packages (npm ci)" >&2
  (cd "$here" && npm ci --no-audit --no-fund >&2) || {
    echo "protocol client: npm ci failed in $here: run it by hand (scripts/test.sh does)" >&2
    exit 1
  }
fi
"$here/generate.sh" "$root" "$out"
cd "$here"
DISPATCH_SCHEMA_JS=$out DISPATCHER_BIN=$binary exec node --test --test-reporter=spec test/
