// Precompiled for everything that runs on a loop (reactor/, clients/,
// bench/): the pure layers' headers plus KJ's async core, Cap'n Proto RPC,
// libuv and the wire schema. Parsing these took most of each such file's
// compile time. Used only through target_precompile_headers (top
// CMakeLists.txt); no file includes it.
#pragma once

#include "state/precompiled_state.h"

#include <chrono>
#include <deque>

#include <capnp/rpc-twoparty.h>
#include <capnp/rpc.h>
#include <kj/async-io.h>
#include <kj/async.h>
#include <kj/timer.h>
#include <uv.h>

#include "schema/dispatcher.capnp.h"
