// The dataset kinds dispatch-worker ships for tests, demos and benchmarks:
//   range     count=N splits=S   the integers 0..N-1 as decimal text; split i
//                                holds [i*N/S, (i+1)*N/S)
//   synthetic size=B count=N splits=S   N elements of B bytes (the element's
//                                index in its first 8 bytes, then filler)
//   lines     one file per line after the first   every line of each file
//                                (split i is file i)
#pragma once

#include "clients/dataset_kind.h"

namespace dispatch::clients {

// Registers range, synthetic and lines.
Status RegisterBuiltinDatasetKinds(DatasetKindRegistry& registry);

}  // namespace dispatch::clients
