// The etcd client URLs a dispatcher (--etcd) and dispatchctl (group --etcd)
// are given, as one comma-separated list.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace dispatch::etcd {

// Splits the list; InvalidArgument naming the first entry that is not
// http://HOST:PORT.
Result<std::vector<std::string>> ParseEndpoints(const std::string& list);

}  // namespace dispatch::etcd
