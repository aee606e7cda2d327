// The data service's durable calls, measured against a running dispatcher at
// `address` (single node or an HA leader): getSplit on a DYNAMIC job over an
// indexed split source with one simulated worker's task, single splits
// sequentially then batches; anonymous getOrCreateJob, sequential and
// pipelined. Shared by `dataservice` and `dataservice-ha`.
#pragma once

#include <cstdint>
#include <string>

#include "common/flag_parser.h"

namespace dispatch::bench {

struct SplitRun {
  uint64_t single_splits = 5000;
  uint64_t batch = 1024;
  uint64_t batched_calls = 500;
};

struct SplitFigures {
  double p50_ms = 0, p99_ms = 0, single_per_s = 0, batched_per_s = 0, batched_call_p50_ms = 0;
};

struct JobRun {
  uint64_t sequential = 2000;
  uint64_t pipelined = 20000;
  uint64_t in_flight = 64;
};

struct JobFigures {
  double sequential_per_s = 0, pipelined_per_s = 0;
};

// --single-splits, --batch, --batched-calls, --jobs-sequential,
// --jobs-pipelined, --in-flight.
void DeclareSplitAndJobFlags(FlagParser& parser, SplitRun& splits, JobRun& jobs);

SplitFigures MeasureSplits(const std::string& address, const SplitRun& run);
JobFigures MeasureJobs(const std::string& address, const JobRun& run);

}  // namespace dispatch::bench
