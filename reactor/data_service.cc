#include "reactor/data_service.h"

#include <string>
#include <utility>

#include "common/log.h"
#include "reactor/task_info.h"

namespace dispatch::reactor {
namespace {

state::DataPolicy PolicyOf(const DataServiceOptions& options) {
  state::DataPolicy policy;
  policy.fault_tolerant_mode = options.fault_tolerant_mode;
  policy.has_worker_list = !options.worker_addresses.empty();
  policy.max_splits_per_call = options.max_splits_per_call;
  policy.max_name_bytes = options.max_name_bytes;
  policy.job_gc_timeout_ms = options.job_gc_timeout_ms;
  policy.client_timeout_ms = options.client_timeout_ms;
  policy.worker_grace_ms = WorkerGraceMs(options);
  return policy;  // planted_bug stays kNone: it is for tests of the planners alone
}

}  // namespace

DataService::DataService(uv_loop_t* loop, DurableState& durable, DataServiceOptions options,
                         uint64_t incarnation)
    : loop_(loop),
      durable_(durable),
      options_(std::move(options)),
      incarnation_(incarnation),
      policy_(PolicyOf(options_)),
      serving_clock_(loop),
      workers_(serving_clock_, soft_, durable, options_),
      datasets_(durable.state()),
      split_sources_([this](uint64_t dataset_id) -> Result<state::SplitSourceSummary> {
        Result<const SplitSourceInfo*> source = datasets_.SplitSource(dataset_id);
        if (!source.ok()) return source.status();
        return state::SplitSourceSummary{(*source)->kind != SplitSourceInfo::Kind::kNone,
                                         (*source)->num_splits};
      }),
      closures_(kj::refcounted<ClosureDispatcher>(loop, durable, workers_, options_.closures)) {
  workers_.SetWorkerLostHandler(
      [this](uint64_t worker_id) { closures_->OnWorkerLost(worker_id); });
  // Without a grace period a removed worker's tasks are handed over at once.
  if (policy_.worker_grace_ms == 0) workers_.SetWorkerRemovedHandler([this]() { RunHandOvers(); });
}

// Sessions may hold the closure dispatcher a while longer: it serves no more.
DataService::~DataService() { closures_->Close(); }

Status DataService::Start() {
  if (!options_.fault_tolerant_mode && durable_.state().NumApplied() > 0) {
    DISPATCH_RETURN_IF_ERROR(durable_.ResetKeepingIds());
    Log(LogLevel::kInfo,
        "fault-tolerant mode is off: starting from an empty state (clients of the previous run get "
        "clear errors)");
  }
  DISPATCH_RETURN_IF_ERROR(closures_->Start());
  soft_.Initialize(durable_.state(), serving_clock_.NowMs(), durable_.pipeline().NowMicros());
  StartTimers();
  return Status::Ok();
}

state::Stamp DataService::Stamp() const {
  return state::Stamp{durable_.pipeline().NowMicros(), durable_.pipeline().max_record_bytes()};
}

Status DataService::Carry(const state::UpdateList& updates) {
  for (size_t i = 0; i < updates.size(); ++i) DISPATCH_RETURN_IF_ERROR(CarryOne(updates, i));
  return Status::Ok();
}

Status DataService::CarryOne(const state::UpdateList& updates, size_t i) {
  std::optional<std::string> bytes = updates.EncodedIfOneSegment(i);
  return bytes.has_value() ? durable_.pipeline().Submit(updates[i], std::move(*bytes))
                           : durable_.pipeline().Submit(updates[i]);
}

Status DataService::CheckWorkerAddress(std::string_view address) const {
  if (options_.worker_addresses.empty() || WorkerIndex(options_, address) >= 0) return Status::Ok();
  return FailedPreconditionError("worker address " + std::string(address) +
                                 " is not in the configured --worker-addresses list");
}

Status DataService::CheckName(std::string_view what, std::string_view value) const {
  return state::CheckNameLength(what, value, options_.max_name_bytes);
}

}  // namespace dispatch::reactor
