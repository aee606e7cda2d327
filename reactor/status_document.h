// The /api/status document: what the status page shows, as one JSON object
// (encoded by Cap'n Proto's JSON codec, off the loop). Lists are bounded so a scrape stays
// small and quick whatever the fleet: at most kMaxWorkersListed workers,
// kMaxJobsListed jobs (kMaxTasksPerJob tasks each) and kMaxCoordinatorsListed
// coordinators, with the totals beside them ("workersTotal", ...), so the
// page can say how many it leaves out. Its fields are listed in docs/operators/metrics.md.
// REQUIRES: loop thread.
#pragma once

#include <cstddef>
#include <string>

#include "reactor/json_tree.h"

namespace dispatch::reactor {

class DispatcherServer;
class Frontend;

inline constexpr size_t kMaxWorkersListed = 200;
inline constexpr size_t kMaxJobsListed = 100;
inline constexpr size_t kMaxTasksPerJob = 100;
inline constexpr size_t kMaxCoordinatorsListed = 50;

// REQUIRES: loop thread. The caller encodes it (Json::Encode), anywhere.
Json CollectStatus(DispatcherServer& server);
// The part the front alone knows (version, incarnation, uptime, readiness as
// the caller tells it, connections), which is all a process that does not
// serve (an HA standby) shows. REQUIRES: loop thread.
Json CollectFrontStatus(Frontend& front, bool ready, const std::string& not_ready_because);

}  // namespace dispatch::reactor
