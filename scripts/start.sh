#!/usr/bin/env bash
# Installs what is missing, builds, and runs the dispatcher in the foreground
# on 127.0.0.1:5050 with its work dir (SQLite journal, lock) in ./dispatch-data.
# Extra arguments go to the dispatcher (see `--help`). Ctrl-C stops it cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target dispatcher
exec build/reactor/dispatcher --listen tcp:127.0.0.1:5050 --work-dir ./dispatch-data "$@"
