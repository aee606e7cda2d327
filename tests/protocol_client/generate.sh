#!/usr/bin/env bash
# Compiles the wire schema (schema/dispatcher.capnp, schema/data_transfer.capnp)
# to JavaScript with capnp-es's plugin, into OUT, from copies of those two files
# alone: the client is built from the schema files and nothing else of ours.
# usage: generate.sh REPO_ROOT OUT
set -euo pipefail
root=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
plugin=$here/node_modules/.bin/capnpc-js
rm -rf "$out"
mkdir -p "$out/schema"
cp "$root/schema/dispatcher.capnp" "$root/schema/data_transfer.capnp" "$out/schema/"
# The generated modules import "capnp-es" (and the plugin type-checks them
# from OUT): resolve it from this package.
ln -sfn "$here/node_modules" "$out/node_modules"
files=("$out/schema/dispatcher.capnp" "$out/schema/data_transfer.capnp")
# Before issue 16's self-contained schema, dispatcher.capnp imported three
# enums from the internal journal schema by an absolute path of ours; capnp-es
# cannot place such an import. Then (only then) the journal schema is compiled
# beside it and the import made relative. Inert once the wire schema imports
# nothing of ours.
if grep -q 'import "/schema/journal.capnp"' "$out/schema/dispatcher.capnp"; then
  cp "$root/schema/journal.capnp" "$out/schema/"
  sed -i 's#import "/schema/journal.capnp"#import "journal.capnp"#' "$out/schema/dispatcher.capnp"
  # capnp-es type-checks a file's imports from OUT: the journal module (with
  # its .d.ts) must be there before dispatcher.capnp is compiled.
  (cd "$out/schema" && node "$here/node_modules/capnp-es/dist/compiler/capnpc-js.mjs" \
     -ojs,dts:"$out" --src-prefix="$out/schema" journal.capnp >&2)
fi
capnp compile -o"$plugin:$out" --src-prefix="$out/schema" "${files[@]}" >&2
ls "$out"/dispatcher.js "$out"/data_transfer.js >/dev/null
