#include "clients/split_reading_task.h"

#include <kj/debug.h>

#include <algorithm>

#include "common/log.h"

namespace dispatch::clients {
namespace {

class SplitReadingTask final : public TaskHandler {
 public:
  explicit SplitReadingTask(SplitReadingOptions options) : options_(options) {}

  kj::Promise<void> Run(TaskContext& context) override {
    const TaskDescription& task = context.task();
    kj::Promise<void> work = kj::READY_NOW;
    if (task.processing_mode == rpc::ProcessingMode::DYNAMIC) {
      uint32_t providers = std::max<uint32_t>(1, task.num_split_providers);
      for (uint32_t p = 0; p < providers; ++p) {
        work = work.then([this, &context, p]() { return ReadProvider(context, p); });
      }
    } else {
      Log(LogLevel::kDebug, "task ", task.task_id, " (", ProcessingModeName(task.processing_mode),
          ", worker ", task.worker_index, " of ", task.num_workers,
          "): no splits to read and nothing to produce yet");
    }
    return work.then([this, &context]() -> kj::Promise<void> {
      const TaskDescription& task = context.task();
      Log(LogLevel::kDebug, "task ", task.task_id, ": read ", splits_read_, " splits",
          options_.hold ? "; holding it until deleted" : "; reporting it complete");
      if (options_.hold) return kj::NEVER_DONE;
      return kj::READY_NOW;
    });
  }

 private:
  // Reads provider `p` to its end of splits for repetition 0.
  kj::Promise<void> ReadProvider(TaskContext& context, uint32_t p) {
    return context.splits(p).Next(0).then(
        [this, &context, p](SplitBatch&& batch) -> kj::Promise<void> {
          splits_read_ += batch.splits.size();
          for (const SplitItem& split : batch.splits) {
            Log(LogLevel::kDebug, "task ", context.task().task_id, " provider ", p, ": split ",
                split.index, split.payload.empty() ? "" : " payload ", split.payload.c_str());
          }
          if (batch.end_of_splits) return kj::READY_NOW;
          return ReadProvider(context, p);
        });
  }

  SplitReadingOptions options_;
  uint64_t splits_read_ = 0;
};

}  // namespace

kj::Own<TaskHandler> SplitReadingFactory::CreateHandler(const TaskDescription&) {
  return kj::heap<SplitReadingTask>(options_);
}

}  // namespace dispatch::clients
