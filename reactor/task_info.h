// How a task looks on the wire (rpc::TaskInfo) to workers, consumers and
// listings, and the version of a job's task list that lets a consumer's
// heartbeat skip an unchanged list. Both are pure functions of the state and
// the configuration, so they survive restarts without state of their own.
#pragma once

#include <cstdint>
#include <vector>

#include "reactor/data_service_options.h"
#include "schema/dispatcher.capnp.h"
#include "state/dispatcher_state.h"

namespace dispatch::reactor {

// The worker's place in the configured worker list; -1 when absent.
int64_t WorkerIndex(const DataServiceOptions& options, std::string_view address);

void FillTaskInfo(const state::DispatcherState& state, const DataServiceOptions& options,
                  const state::Task& task, rpc::TaskInfo::Builder info);

// A nonzero hash of what consumers see of the tasks (ids, addresses, starting
// rounds, finished flags); equal lists have equal versions.
uint64_t TaskListVersion(const std::vector<const state::Task*>& tasks);

}  // namespace dispatch::reactor
