#!/usr/bin/env bash
# Runs every command of the ```sh blocks of README.md and of every Markdown
# file under docs/ as written, so the documents cannot drift from the
# binaries. The files run in a fixed order, README.md first, then docs/**/*.md
# sorted by path (LC_ALL=C), each file's blocks top to bottom, all against one
# dispatcher: a command may rely on what an earlier one started (the tour's
# worker in the background), in its own file or an earlier one. The only
# changes: the dispatcher's address (tcp:127.0.0.1:5050) becomes the one a
# dispatcher started on port 0 reported, and the worker's (tcp:127.0.0.1:5051)
# becomes port 0 (the worker listens where the kernel says and registers
# there), so two suites can share a machine. How each kind of line is run:
#   ./scripts/start.sh  started on port 0 with its own work dir; must
#                       print its listening line and exit 0 on SIGINT
#   ./scripts/demo.sh   run; must exit 0
#   ./scripts/test.sh   not run: it is the command running this test
#   build/bench/dispatch-bench SUB ...  run with --help appended (the flags are
#                       parsed and checked, the minutes-long run is not done)
#   a line ending in &  started in the background; must register as a worker
#                       (and a worker on port 0 must name the port it bound)
#   any other build/... must exit 0
# Usage: readme_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
cd "$SRC"
T=$(mktemp -d /tmp/dispatch-readme.XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "readme_test: $*" >&2; exit 1; }

wait_for_line() {  # FILE TEXT SECONDS: polls FILE until it has TEXT, or fails
  local deadline=$((SECONDS + $3))
  until grep -q "$2" "$1" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || { cat "$1" >&2; fail "no '$2' in $1 within $3 s"; }
    sleep 0.1
  done
}

# The documents in the order they run, and their ```sh blocks, one command a
# line, comments dropped; SOURCES[i] names the file of COMMANDS[i].
mapfile -t FILES < <(echo README.md; find docs -name '*.md' -type f | LC_ALL=C sort)
COMMANDS=()
SOURCES=()
for file in "${FILES[@]}"; do
  mapfile -t found < <(awk '/^```sh$/ {on=1; next} /^```/ {on=0} on' "$file" |
                       sed -e 's/[[:space:]]\+#.*$//' -e '/^[[:space:]]*$/d')
  [ "$file" != README.md ] || [ ${#found[@]} -ge 5 ] ||
    fail "found only ${#found[@]} commands in README.md's sh blocks"
  COMMANDS+=("${found[@]}")
  for _ in "${found[@]}"; do SOURCES+=("$file"); done
done
[ ${#COMMANDS[@]} -ge 20 ] ||
  fail "found only ${#COMMANDS[@]} commands in the sh blocks of ${FILES[*]}"

"$BUILD/reactor/dispatcher" --listen=tcp:127.0.0.1:0 --http=tcp:127.0.0.1:0 --work-dir="$T/work" --log-level=warning \
  >"$T/dispatcher.out" 2>&1 &
PIDS+=($!)
wait_for_line "$T/dispatcher.out" "dispatcher listening on" 30
ADDR=$(sed -n 's/^dispatcher listening on //p' "$T/dispatcher.out" | head -1)
WORKER="tcp:127.0.0.1:0"

# The scripts build into ./build; a suite built elsewhere runs the binaries of
# its own tree and leaves the scripts to the suite that is built there.
OWN_BUILD=$([ "$(realpath "$BUILD")" = "$(realpath "$SRC/build")" ] && echo yes || echo no)

ran=0
for i in "${!COMMANDS[@]}"; do
  line=${COMMANDS[$i]}
  cmd=${line//tcp:127.0.0.1:5050/$ADDR}
  cmd=${cmd//tcp:127.0.0.1:5051/$WORKER}
  [ "$OWN_BUILD" = yes ] || cmd=${cmd/#build\//$BUILD/}
  echo "== ${SOURCES[$i]}: $line"
  case "$cmd" in
    ./scripts/test.sh*)
      echo "   (not run: this suite is that command)"
      continue ;;
    ./scripts/*)
      if [ "$OWN_BUILD" = no ]; then echo "   (not run: this suite is not built in ./build)"; continue; fi ;;&
    ./scripts/start.sh*)
      bash -c "exec $cmd --listen=tcp:127.0.0.1:0 --http=tcp:127.0.0.1:0 --work-dir=$T/start-data" >"$T/start.out" 2>&1 &
      pid=$!
      PIDS+=($pid)
      wait_for_line "$T/start.out" "dispatcher listening on" 600
      kill -INT "$pid"
      rc=0; wait "$pid" || rc=$?
      [ "$rc" -eq 0 ] || { cat "$T/start.out" >&2; fail "start.sh exited $rc on SIGINT"; } ;;
    */bench/dispatch-bench\ *)
      bash -c "$cmd --help" >/dev/null || fail "'$cmd --help' failed" ;;
    *\&)
      bash -c "exec ${cmd%&}" >"$T/background.out" 2>&1 &
      PIDS+=($!)
      wait_for_line "$T/background.out" "registered as worker" 30
      # Asked for port 0, a worker names the port it bound, never 0.
      if [[ $cmd == *"--address=$WORKER"* ]] &&
         ! grep -q '^dispatch-worker tcp:127\.0\.0\.1:[1-9][0-9]* started' "$T/background.out"; then
        cat "$T/background.out" >&2; fail "the worker did not report the port it bound"
      fi ;;
    *)
      bash -c "timeout 300 $cmd" >"$T/command.out" 2>&1 || { cat "$T/command.out" >&2; fail "'$cmd' failed"; }
      head -5 "$T/command.out" | sed 's/^/   /' ;;
  esac
  ran=$((ran + 1))
done
echo "$ran commands of ${#FILES[@]} documents ran as written"
