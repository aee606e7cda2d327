// `dispatchctl stats` and `dispatchctl top`: the figures of the status page
// in a terminal, from the dispatcher's RPC stats (getVersion, getServerStats,
// getClosureStats, getWorkers, listJobs). `stats` prints them once; `top`
// again every --interval seconds (clearing a terminal first), with rates
// since the previous refresh, until Ctrl-C or --iterations refreshes (a
// dispatcher lost meanwhile ends it with exit 1 and the error).
// With --json: one document of those replies in capnp's JSON encoding
// (`version`, `server`, `closures` as the RPC structs, 64-bit counters as
// strings; `workers` and `jobs` counts); `top --json` writes one per line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/flag_parser.h"

namespace dispatch::clients {

struct TopFlags {
  uint64_t interval_s = 2;
  uint64_t iterations = 0;  // 0: until interrupted
};

void DeclareTopFlags(FlagParser& parser, TopFlags& flags);
// The usage error of `stats` / `top` (empty when fine).
std::string CheckStatsArgs(const std::vector<std::string>& args);
// Runs `stats` or `top` (args[0]); returns the exit code (0 ok, 1 the
// dispatcher failed or could not be reached, its message on stderr).
int RunStats(const std::string& dispatcher, const std::string& token,
             const std::vector<std::string>& args, const TopFlags& flags, bool json,
             uint64_t timeout_ms);

}  // namespace dispatch::clients
