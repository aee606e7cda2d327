#!/usr/bin/env bash
# The whole loop in one minute: builds, then starts a dispatcher (its SQLite
# journal in a temporary work dir), two dispatch-workers and one consumer
# (`dispatchctl read`), schedules closures (`dispatchctl run`), reads `range`
# with DYNAMIC sharding, and prints what happened: which worker ran which
# closure, who produced which elements, the job and its tasks, and a check that
# every element was read exactly once. Everything it started is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target dispatcher dispatch-worker dispatchctl >/dev/null

COUNT=${DEMO_COUNT:-10000}
SPLITS=${DEMO_SPLITS:-20}
DIR=$(mktemp -d /tmp/dispatch-demo.XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT

wait_for_line() {  # FILE TEXT: waits (up to 30 s) until FILE has a line containing TEXT
  for _ in $(seq 300); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "demo: timed out waiting for '$2' in $1" >&2; cat "$1" >&2; exit 1
}

echo "== dispatcher"
build/reactor/dispatcher --listen tcp:127.0.0.1:0 --http tcp:127.0.0.1:0 --work-dir "$DIR/work" --log-level=warning \
  >"$DIR/dispatcher.out" 2>&1 &
PIDS+=($!)
wait_for_line "$DIR/dispatcher.out" "dispatcher listening on"
ADDR=$(sed -n 's/^dispatcher listening on //p' "$DIR/dispatcher.out" | head -1)
wait_for_line "$DIR/dispatcher.out" "dispatcher status page on"
PAGE=$(sed -n 's/^dispatcher status page on //p' "$DIR/dispatcher.out" | head -1)
echo "   listening on $ADDR, journal in $DIR/work, status page on $PAGE"

echo "== two workers"
for i in 1 2; do
  # Port 0: the worker listens where the kernel says; its start line names it.
  build/clients/dispatch-worker --dispatcher="$ADDR" --address=tcp:127.0.0.1:0 --split-batch=2 \
    --log-level=warning >"$DIR/worker$i.out" 2>&1 &
  PIDS+=($!)
  wait_for_line "$DIR/worker$i.out" "registered as worker"
  W=$(sed -n 's/^dispatch-worker \(.*\) started.*/\1/p' "$DIR/worker$i.out" | head -1)
  echo "   $(grep 'registered as worker' "$DIR/worker$i.out" | head -1) at $W"
done

echo "== closures: a coordinator schedules 4 'sleep' closures (each returns the worker that ran it)"
build/clients/dispatchctl --dispatcher="$ADDR" run --count=4 sleep 50 | sed 's/^/   /'
echo "== and 2 'echo' closures"
build/clients/dispatchctl --dispatcher="$ADDR" run --count=2 echo "hello from the demo" | sed 's/^/   /'

echo "== one consumer reads 'range count=$COUNT splits=$SPLITS' with DYNAMIC sharding"
build/clients/dispatchctl --dispatcher="$ADDR" read --mode=dynamic --job-name=demo --print \
  --per-task range count="$COUNT" splits="$SPLITS" >"$DIR/read.out"
grep -v '^[0-9]*$' "$DIR/read.out" | sed 's/^/   /'
JOB=$(sed -n 's/^reading job \([0-9]*\) .*/\1/p' "$DIR/read.out")

echo "== the job and its tasks (one per worker)"
build/clients/dispatchctl --dispatcher="$ADDR" job "$JOB" | sed 's/^/   /'

echo "== check"
READ=$(grep '^[0-9]*$' "$DIR/read.out" | sort -n | uniq | wc -l)
DUPS=$(grep '^[0-9]*$' "$DIR/read.out" | sort -n | uniq -d | wc -l)
echo "   $READ distinct integers of $COUNT read, $DUPS read twice"
if [ "$READ" -eq "$COUNT" ] && [ "$DUPS" -eq 0 ]; then
  echo "   every element exactly once"
else
  echo "   MISMATCH" >&2
  exit 1
fi
