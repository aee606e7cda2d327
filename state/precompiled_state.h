// Precompiled for state/: common/'s headers plus the journal record's
// generated header, which nearly every file of state/ parses. No event loop
// (kj/async*, uv.h) and no SQLite: state/ must build without them (STYLE.md,
// rule 1). Used only through target_precompile_headers (top
// CMakeLists.txt); no file includes it.
#pragma once

#include "common/precompiled_core.h"

#include "schema/journal.capnp.h"
