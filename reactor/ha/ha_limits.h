// HA mode's limits (docs/high_availability.md §4), and the one function that
// applies them to a dispatcher's options. Everything a leader journals rides
// in etcd transactions of at most kMaxEtcdBatchBytes (etcd refuses requests
// over ~1.5 MiB), so a pass's batch is kept well under it: its records and
// what they store take at most kHaMaxPassBytes before its last item, and that
// item is at most one record, dataset definition or set of results of the
// limits below, so even with Cap'n Proto's overhead one pass always fits one
// transaction. An update over these limits is refused at validation naming
// the limit, as the single-node journal's own limits are.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace dispatch::reactor {
struct DispatcherOptions;
}  // namespace dispatch::reactor

namespace dispatch::ha {

inline constexpr size_t kMaxEtcdBatchBytes = size_t{1} << 20;
inline constexpr size_t kHaMaxPassBytes = size_t{192} << 10;
inline constexpr size_t kHaMaxRecordBytes = size_t{256} << 10;
inline constexpr size_t kHaMaxDatasetBytes = size_t{256} << 10;
inline constexpr size_t kHaMaxResultBytes = size_t{256} << 10;
inline constexpr size_t kHaResultBytesPerRecord = size_t{256} << 10;

// Lowers `options`' limits to HA mode's: the pass's batch, the record, the
// dataset definition and the closure result (when --max-result-bytes is 0
// it becomes the smaller of kHaMaxResultBytes and half a message), and
// keeps results in the journal (no result files: etcd holds them).
// InvalidArgument naming the limit when an explicit --max-result-bytes is
// over kHaMaxResultBytes. The one place these limits are set.
Status ApplyHaLimits(reactor::DispatcherOptions& options);

}  // namespace dispatch::ha
