// Precompiled for common/, and under every other layer's: the standard
// headers and the Cap'n Proto message core that nearly every file parses.
// Nothing here may pull in an event loop (kj/async*, uv.h), SQLite or the
// schema: common/ builds before the schema and without them.
// Used only through target_precompile_headers (top CMakeLists.txt); no file
// includes it, so every file still names the headers it uses.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/debug.h>
