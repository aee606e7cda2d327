// The dataset kinds dispatch-worker ships for tests, demos and benchmarks:
//   range count=N splits=S: the integers 0..N-1 as text, split i = [iN/S, (i+1)N/S)
//   synthetic size=B count=N splits=S: B-byte elements, the index in the first 8
//   lines FILE...: every line of each file, split i = file i
#pragma once

#include "clients/dataset_kind.h"

namespace dispatch::clients {

// Registers range, synthetic and lines.
Status RegisterBuiltinDatasetKinds(DatasetKindRegistry& registry);

}  // namespace dispatch::clients
