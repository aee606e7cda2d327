#!/usr/bin/env bash
# The wire schema compiles alone: dispatcher.capnp and data_transfer.capnp,
# copied without the rest of the repository into an empty directory, compile
# with `capnp compile` and nothing but its standard import path (which holds
# /capnp/c++.capnp). A client in another language needs exactly these two
# files; an import of the internal journal schema (or of any other file of
# ours) fails here.
# Usage: wire_schema_test.sh CAPNP SOURCE_DIR
set -euo pipefail
CAPNP=$1
SRC=$2
T=$(mktemp -d /tmp/dispatch-wire-schema.XXXXXX)
trap 'rm -rf "$T"' EXIT
cp "$SRC/schema/dispatcher.capnp" "$SRC/schema/data_transfer.capnp" "$T/"
cd "$T"
for file in dispatcher.capnp data_transfer.capnp; do
  if ! "$CAPNP" compile -o- "$file" >/dev/null 2>"$T/errors"; then
    echo "wire_schema_test: $file does not compile on its own:" >&2
    cat "$T/errors" >&2
    exit 1
  fi
done
# No import other than the standard ones: a relative import of a file we
# happened to copy would compile here yet still tie clients to it.
if grep -n 'import "' dispatcher.capnp data_transfer.capnp | grep -v 'import "/capnp/'; then
  echo "wire_schema_test: the wire schema imports a file that is not part of capnp's standard path" >&2
  exit 1
fi
echo "wire schema compiles alone"
