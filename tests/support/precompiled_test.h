// Precompiled for the test suites: the loop layers' headers plus
// GoogleTest. Used only through target_precompile_headers (top
// CMakeLists.txt); no file includes it.
#pragma once

#include "reactor/uvkj/precompiled_loop.h"

#include <gtest/gtest.h>
