#!/usr/bin/env bash
# The direction of dependencies (STYLE.md rule 5, DESIGN.md's layout), checked
# on the sources and on what dispatchctl links:
#  - clients/ includes nothing of the reactor but its bridge (reactor/uvkj/),
#    the etcd client (reactor/etcd/) and the HA wire format (reactor/ha/wire/);
#  - state/ includes no event loop (uv.h, kj/async*), SQLite or storage/;
#  - dispatchctl carries no SQLite and no dispatcher server.
# Usage: layering_test.sh SOURCE_DIR DISPATCHCTL
set -euo pipefail
SRC=$1
CTL=$2
failed=0
fail() { echo "layering: $*" >&2; failed=1; }

# Every include of a file under reactor/ that is not one of the three
# libraries clients may use.
while IFS= read -r hit; do
  fail "clients/ reaches into the reactor: $hit"
done < <(grep -rnE '#include "reactor/' "$SRC/clients" --include='*.h' --include='*.cc' |
         grep -vE '#include "reactor/(uvkj|etcd|ha/wire)/' || true)

while IFS= read -r hit; do
  fail "state/ must stay pure: $hit"
done < <(grep -rnE '#include [<"](uv\.h|sqlite3\.h|kj/async[^">]*|storage/[^">]*|reactor/[^">]*)[">]' \
           "$SRC/state" --include='*.h' --include='*.cc' || true)

symbols=$(nm -C "$CTL")
if grep -q ' [TU] sqlite3_' <<<"$symbols"; then
  fail "dispatchctl links SQLite: $(grep -m1 ' [TU] sqlite3_' <<<"$symbols")"
fi
if grep -q 'dispatch::reactor::DispatcherServer' <<<"$symbols"; then
  fail "dispatchctl links the dispatcher server"
fi
if grep -q 'dispatch::storage::Store::' <<<"$symbols"; then
  fail "dispatchctl links storage's Store"
fi

[ "$failed" -eq 0 ] && echo "layering: clients/, state/ and dispatchctl depend only on what they may"
exit "$failed"
