// ClosureDispatcher: pushes to workers. Closures assigned in a pass go to
// their worker in runClosures calls of at most kMaxPushBytes each, with the
// per-worker resources they use that the connection has not had; committed
// resources go to every worker that can build them as soon as they exist or
// the worker attaches. A failed push ends its runs as lost (PlanRunEnded).

#include <kj/debug.h>

#include <set>
#include <utility>

#include "common/log.h"
#include "reactor/closure_dispatcher.h"
#include "state/bytes.h"
#include "state/record_budget.h"

namespace dispatch::reactor {
namespace {

void FillResourceSpec(rpc::ResourceSpec::Builder spec, const state::PerWorkerResource& resource) {
  spec.setResourceId(resource.id);
  spec.setFunction(resource.function_name);
  spec.setArgs(state::AsData(resource.args));
}

}  // namespace

kj::Promise<void> ClosureDispatcher::Push(uint64_t worker_id, std::vector<uint64_t> closure_ids) {
  std::vector<state::ClosureRun> runs;
  std::vector<const state::Closure*> closures;
  for (uint64_t id : closure_ids) {
    const state::Closure* closure = state().FindClosure(id);
    if (closure == nullptr || closure->state != state::ClosureState::ASSIGNED ||
        closure->worker_id != worker_id) {
      continue;  // lost its worker or was cancelled meanwhile
    }
    closures.push_back(closure);
    runs.push_back({id, worker_id, closure->attempts});
  }
  if (closures.empty()) return kj::READY_NOW;
  auto entry = live_.find(worker_id);
  rpc::WorkerControl::Client* control =
      entry == live_.end() ? nullptr : workers_.ControlOf(entry->second.address);
  if (control == nullptr) {
    PushFailed(worker_id, runs);
    return kj::READY_NOW;
  }
  // One runClosures per kMaxPushBytes of closures (at least one closure
  // each), so that a worker with many slots and large closures is never sent
  // a message past its limit.
  auto pushes = state::SplitIntoRecords(closures.size(), 0, kMaxPushBytes, [&](size_t i) {
    return state::ScheduledItemWords(closures[i]->function_name, closures[i]->args.size(),
                                     closures[i]->resources.size());
  });
  auto sends = kj::heapArrayBuilder<kj::Promise<void>>(pushes.size());
  for (auto [begin, end] : pushes) {
    auto request = control->runClosuresRequest();
    auto list = request.initClosures(static_cast<unsigned>(end - begin));
    std::set<uint64_t> resource_ids;
    for (size_t i = begin; i < end; ++i) {
      const state::Closure& closure = *closures[i];
      auto item = list[static_cast<unsigned>(i - begin)];
      item.setClosureId(closure.id);
      item.setAttempt(closure.attempts);
      item.setFunction(closure.function_name);
      item.setArgs(state::AsData(closure.args));
      auto resources = item.initResources(static_cast<unsigned>(closure.resources.size()));
      for (unsigned r = 0; r < closure.resources.size(); ++r)
        resources.set(r, closure.resources[r]);
      for (uint64_t id : closure.resources) {
        // Those this connection has had already (SendResources) stay out:
        // a closure of many large resources still makes a small push.
        if (!entry->second.resources_sent.contains(id)) resource_ids.insert(id);
      }
    }
    auto specs = request.initResources(static_cast<unsigned>(resource_ids.size()));
    unsigned r = 0;
    for (uint64_t id : resource_ids) FillResourceSpec(specs[r++], *state().FindResource(id));
    std::vector<state::ClosureRun> pushed(runs.begin() + begin, runs.begin() + end);
    sends.add(request.send().then([](auto&&) {},
                                  [this, worker_id, pushed = kj::mv(pushed)](kj::Exception&& e) {
                                    Log(LogLevel::kDebug, "runClosures to worker ", worker_id,
                                        " failed: ", e.getDescription());
                                    PushFailed(worker_id, pushed);
                                  }));
  }
  return kj::joinPromises(sends.finish());
}

void ClosureDispatcher::SendResources(uint64_t worker_id) {
  // Only committed resources: an id a crash could hand out again for another
  // resource must never reach a worker's cache.
  AddTask(durable_.Barrier().then([this, worker_id]() -> kj::Promise<void> {
    auto entry = live_.find(worker_id);
    if (entry == live_.end() || entry->second.worker.slots == 0) return kj::READY_NOW;
    rpc::WorkerControl::Client* control = workers_.ControlOf(entry->second.address);
    if (control == nullptr) return kj::READY_NOW;
    // Those it can build: a worker without a resource's function never gets
    // a closure that uses it either.
    const state::FunctionSet& functions = *entry->second.worker.functions;
    std::vector<const state::PerWorkerResource*> missing;
    for (const auto& [id, resource] : state().resources()) {
      if (!entry->second.resources_sent.contains(id) && functions.contains(resource.function_name))
        missing.push_back(&resource);
    }
    if (missing.empty()) return kj::READY_NOW;
    // Cut by bytes like closure pushes: many large resources never make one
    // message past the worker's limit.
    auto pushes = state::SplitIntoRecords(missing.size(), 0, kMaxPushBytes, [&](size_t i) {
      return state::ScheduledItemWords(missing[i]->function_name, missing[i]->args.size(), 0);
    });
    auto sends = kj::heapArrayBuilder<kj::Promise<void>>(pushes.size());
    for (auto [begin, end] : pushes) {
      auto request = control->runClosuresRequest();
      request.initClosures(0);
      auto specs = request.initResources(static_cast<unsigned>(end - begin));
      std::vector<uint64_t> ids;
      for (size_t i = begin; i < end; ++i) {
        FillResourceSpec(specs[static_cast<unsigned>(i - begin)], *missing[i]);
        entry->second.resources_sent.insert(missing[i]->id);
        ids.push_back(missing[i]->id);
      }
      sends.add(request.send().then([](auto&&) {},
                                    [this, worker_id, ids](kj::Exception&& e) {
                                      // The connection is going: the next one sends them all again.
                                      Log(LogLevel::kDebug,
                                          "sending per-worker resources to worker ", worker_id,
                                          " failed: ", e.getDescription());
                                      auto entry = live_.find(worker_id);
                                      if (entry == live_.end()) return;
                                      for (uint64_t id : ids)
                                        entry->second.resources_sent.erase(id);
                                    }));
    }
    return kj::joinPromises(sends.finish());
  }));
}

}  // namespace dispatch::reactor
