#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs the whole test suite
# through ctest, ending with ctest's summary. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
# The second client's pinned npm packages (package-lock.json), when missing or stale.
if [ ! -f tests/protocol_client/node_modules/.package-lock.json ] ||
   [ tests/protocol_client/package-lock.json -nt tests/protocol_client/node_modules/.package-lock.json ]; then
  (cd tests/protocol_client && npm ci --no-audit --no-fund)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
cd build
# ha-long: measurements that take minutes (tests/etcd/CMakeLists.txt), run by hand.
ctest --output-on-failure -j"$(nproc)" --timeout 900 -LE ha-long
