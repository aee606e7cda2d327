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
  // The input results of closures[i] (empty for most), read back from the
  // store before anything is sent: a closure whose inputs cannot be read
  // intact, or do not fit one push, fails instead of running.
  std::vector<std::vector<std::string>> inputs;
  std::vector<uint64_t> input_words;
  for (uint64_t id : closure_ids) {
    const state::Closure* closure = state().FindClosure(id);
    if (closure == nullptr || closure->state != state::ClosureState::ASSIGNED ||
        closure->worker_id != worker_id) {
      continue;  // lost its worker or was cancelled meanwhile
    }
    const state::ClosureRun run{id, worker_id, closure->attempts};
    std::vector<std::string> bytes;
    uint64_t words = 0;
    if (!closure->inputs.empty()) {
      Result<std::vector<std::string>> read = ReadInputs(*closure);
      if (!read.ok()) {
        Status failed = Carry(state::PlanUserError(state(), run, read.status().ToString(), Stamp()));
        if (!failed.ok()) Log(LogLevel::kWarning, "closure input: ", failed.ToString().c_str());
        continue;
      }
      bytes = std::move(*read);
      for (const std::string& input : bytes) words += 1 + (input.size() + 7) / 8;
    }
    closures.push_back(closure);
    runs.push_back(run);
    inputs.push_back(std::move(bytes));
    input_words.push_back(words);
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
                                     closures[i]->resources.size()) +
           input_words[i];
  });
  auto sends = kj::heapArrayBuilder<kj::Promise<void>>(pushes.size());
  for (auto [begin, end] : pushes) {
    auto request = control->runClosuresRequest();
    auto list = request.initClosures(static_cast<unsigned>(end - begin));
    std::set<uint64_t> resource_ids;
    std::vector<uint64_t> traced;  // closures of this push with a trace
    for (size_t i = begin; i < end; ++i) {
      const state::Closure& closure = *closures[i];
      auto item = list[static_cast<unsigned>(i - begin)];
      item.setClosureId(closure.id);
      item.setAttempt(closure.attempts);
      item.setFunction(closure.function_name);
      item.setArgs(state::AsData(closure.args));
      if (!traces_.empty() && traces_.Traced(closure.id)) {
        item.setTrace(true);
        traced.push_back(closure.id);
      }
      if (!closure.resources.empty()) {  // absent reads as empty
        auto resources = item.initResources(static_cast<unsigned>(closure.resources.size()));
        for (unsigned r = 0; r < closure.resources.size(); ++r)
          resources.set(r, closure.resources[r]);
      }
      if (!inputs[i].empty()) {
        auto list = item.initInputs(static_cast<unsigned>(inputs[i].size()));
        for (unsigned j = 0; j < inputs[i].size(); ++j) {
          list.set(j, state::AsData(inputs[i][j]));
          counters_.input_bytes_pushed += inputs[i][j].size();
        }
      }
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
    if (!traced.empty()) {
      const uint64_t now = uv_hrtime();
      for (uint64_t id : traced) traces_.Stamp(id, kTracePushed, now);
    }
    sends.add(request.send().then([this, worker_id](auto&& reply) {
                                    auto held = live_.find(worker_id);
                                    if (held != live_.end()) held->second.push_replies.push_back(kj::mv(reply));
                                  },
                                  [this, worker_id, pushed = kj::mv(pushed)](kj::Exception&& e) {
                                    Log(LogLevel::kDebug, "runClosures to worker ", worker_id,
                                        " failed: ", e.getDescription());
                                    PushFailed(worker_id, pushed);
                                  }));
  }
  // Their Finish messages go out with the calls just sent.
  entry->second.push_replies.clear();
  return kj::joinPromises(sends.finish());
}

Result<std::vector<std::string>> ClosureDispatcher::ReadInputs(const state::Closure& closure) {
  uint64_t total = closure.function_name.size() + closure.args.size();
  for (uint64_t id : closure.inputs) {
    // The state keeps every input of a closure not done (finished, not
    // released: releases wait for the dependants).
    const state::Closure* input = state().FindClosure(id);
    KJ_ASSERT(input != nullptr && input->state == state::ClosureState::FINISHED,
              "closure runs before its input", closure.id, id);
    total += DurableState::ResultSize(*input);
  }
  if (total > kMaxPushBytes) {
    ++counters_.inputs_over_limit;
    return ResourceExhaustedError(
        "closure " + std::to_string(closure.id) + " with its " +
        std::to_string(closure.inputs.size()) + " input results takes " + std::to_string(total) +
        " bytes, over the limit of " + std::to_string(kMaxPushBytes) +
        " bytes per push to a worker");
  }
  std::vector<std::string> out;
  out.reserve(closure.inputs.size());
  for (uint64_t id : closure.inputs) {
    // Read on the loop, as replies' results are (a page-cached SQLite row).
    Result<std::string> bytes = durable_.GetResult(*state().FindClosure(id));
    if (!bytes.ok()) {
      return Status(bytes.status().code(), "input closure " + std::to_string(id) + " of closure " +
                                               std::to_string(closure.id) + ": " +
                                               bytes.status().message());
    }
    out.push_back(std::move(*bytes));
  }
  return out;
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
