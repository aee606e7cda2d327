#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs the whole test suite
# through ctest, ending with ctest's summary. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 900
