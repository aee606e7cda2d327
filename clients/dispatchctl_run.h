// `dispatchctl run FUNCTION [ARGS]`: schedules closures through the
// Coordinator client (--count of them, each with ARGS), waits for all of them
// (Join) and prints each closure's id and result, one per line, then a
// summary. A failed closure is printed with its error and makes the exit code 1;
// a closure cancelled by --cancel-after-ms is printed as cancelled and does not.
// With --chain each closure after the first takes the previous one's result
// as its input (ScheduleOptions.inputs): `run --chain --count=N sum 1` sums
// to N.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/flag_parser.h"

namespace dispatch::clients {

struct RunFlags {
  uint64_t count = 1;
  int64_t priority = 0;     // ScheduleOptions.priority (an Int32)
  uint64_t timeout_ms = 0;  // ScheduleOptions.timeout (0: none)
  uint64_t cancel_after_ms = 0;  // cancel what is not done this long after scheduling (0: never)
  bool chain = false;  // each closure's input is the previous one
};

void DeclareRunFlags(FlagParser& parser, RunFlags& flags);
// The usage error of `run FUNCTION [ARGS]` (empty when fine).
std::string CheckRunArgs(const std::vector<std::string>& args);
// Returns the exit code (0 every closure finished, 1 otherwise).
int RunClosures(const std::string& dispatcher, const std::string& token,
                const std::vector<std::string>& args, const RunFlags& flags);

}  // namespace dispatch::clients
