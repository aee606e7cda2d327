// The reference worker's task handlers. A DYNAMIC task reads every split of
// every provider for its repetition, then completes; a task of another mode
// has no splits to read and completes at once. Until dataset kinds exist
// (issue 6) nothing is produced: each handler logs what it did at debug level.
// `hold` keeps finished tasks running until deleted (for tests and demos that
// need a job to stay unfinished).
#pragma once

#include <cstdint>

#include "clients/task_handler.h"

namespace dispatch::clients {

struct SplitReadingOptions {
  bool hold = false;  // never complete: run until the dispatcher deletes the task
};

class SplitReadingFactory final : public TaskHandlerFactory {
 public:
  explicit SplitReadingFactory(SplitReadingOptions options) : options_(options) {}
  kj::Own<TaskHandler> CreateHandler(const TaskDescription& task) override;

 private:
  SplitReadingOptions options_;
};

}  // namespace dispatch::clients
