// The per-task plug-in interface of WorkerAgent. An embedding program gives
// the agent a TaskHandlerFactory; the agent asks it for one TaskHandler per
// task the dispatcher assigns, runs it, reports the task complete when its
// Run() promise resolves, and destroys it (cancelling Run()) when the task is
// deleted or the agent stops. Everything here runs on the agent thread.
#pragma once

#include <kj/async.h>
#include <kj/timer.h>

#include <cstdint>
#include <string>
#include <vector>

#include "clients/task_description.h"

namespace dispatch::clients {

struct SplitItem {
  uint64_t index = 0;
  std::string payload;  // empty for indexed split sources
};

struct SplitBatch {
  std::vector<SplitItem> splits;
  bool end_of_splits = false;  // this repetition has no more splits for anyone
  int64_t repetition = 0;      // the repetition the answer is for
};

// The dynamic-sharding split stream of one (task, split provider). Each Next()
// carries the next sequence number; a call whose reply is lost (dropped
// connection, dispatcher restart) is repeated with the SAME sequence once the
// agent is registered again, so the dispatcher hands out every split once.
class SplitFetcher {
 public:
  virtual ~SplitFetcher() noexcept(false) = default;
  // Up to the agent's batch size of splits of `repetition`. Rejects only for
  // errors that retrying cannot fix (unknown task, not a DYNAMIC job).
  // REQUIRES: the previous Next() of this fetcher has resolved.
  virtual kj::Promise<SplitBatch> Next(int64_t repetition) = 0;
  // The sequence number the next call will carry (starts at the agent's
  // first_split_sequence, 1 by default).
  virtual uint64_t next_sequence() const = 0;
};

struct DatasetDefinition {
  uint64_t dataset_id = 0;
  std::string definition;
  std::string metadata;
};

// What a running task may use. Outlives the handler's Run() promise.
class TaskContext {
 public:
  virtual ~TaskContext() noexcept(false) = default;
  virtual const TaskDescription& task() const = 0;
  // The split stream of provider `index`. REQUIRES: index < max(1, num_split_providers).
  virtual SplitFetcher& splits(uint32_t provider_index) = 0;
  // The dataset's definition bytes, fetched once per agent and cached;
  // retried across reconnects like splits.
  virtual kj::Promise<DatasetDefinition> GetDatasetDef() = 0;
  virtual kj::Timer& timer() = 0;
};

class TaskHandler {
 public:
  virtual ~TaskHandler() noexcept(false) = default;
  // Does the task's work. Resolving means the task is complete and is
  // reported so (workerUpdate). Rejecting leaves it unfinished and logged.
  // The promise is dropped (cancelled) when the task is deleted.
  virtual kj::Promise<void> Run(TaskContext& context) = 0;
};

class TaskHandlerFactory {
 public:
  virtual ~TaskHandlerFactory() noexcept(false) = default;
  // A handler for a newly assigned task; nullptr when this worker cannot run
  // it (the task is then held, not run, and logged).
  virtual kj::Own<TaskHandler> CreateHandler(const TaskDescription& task) = 0;
};

}  // namespace dispatch::clients
