// ClosureDispatcher: pushes to workers. Closures assigned in a pass go to
// their worker in runClosures calls of at most kMaxPushBytes each, with the
// per-worker resources they use that the connection has not had; committed
// resources go to every worker that can build them as soon as they exist or
// the worker attaches. A failed push ends its runs as lost (PlanRunEnded).
// Input results go with their closure: read on the loop when they are small
// or at hand; when their stored bytes come to kOffLoopReadBytes or more, read
// on the thread pool (ResultReads) and pushed in a call of their own, copied
// into it in turns, so that a 16 MiB push never holds the loop.

#include <kj/debug.h>
#include <kj/vector.h>

#include <optional>
#include <set>
#include <string>
#include <utility>

#include "common/log.h"
#include "reactor/closure_dispatcher.h"
#include "reactor/copy_in_turns.h"
#include "state/bytes.h"
#include "state/push_planner.h"
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
  Result<std::vector<state::PushedClosure>> plan =
      state::PlanPush(state(), worker_id, closure_ids, kMaxPushBytes, options_.policy);
  KJ_ASSERT(plan.ok(), plan.status().ToString());
  std::vector<PushItem> items;
  // The input results of items[i] read on the loop (empty for most): a
  // closure whose inputs cannot be read intact fails instead of running.
  std::vector<std::vector<std::string>> read_here;
  kj::Vector<kj::Promise<void>> later;  // pushes waiting for their inputs' read on the pool
  for (state::PushedClosure& pushed : *plan) {
    if (!pushed.refused.ok()) {
      ++counters_.inputs_over_limit;
      FailOnInputs(pushed.run, pushed.refused);
      continue;
    }
    std::vector<std::string> bytes;
    if (!pushed.inputs.empty()) {
      InputLocations where = LocateInputs(pushed.inputs);
      if (where.stored_bytes >= kOffLoopReadBytes) {
        later.add(PushAfterReadingInputs(worker_id, pushed.run, std::move(pushed.inputs),
                                         std::move(where)));
        continue;
      }
      Result<std::vector<std::string>> read = ReadInputs(pushed.run.closure_id, pushed.inputs);
      if (!read.ok()) {
        FailOnInputs(pushed.run, read.status());
        continue;
      }
      bytes = std::move(*read);
    }
    // The views point into the strings of an inner vector, whose elements
    // stay put as read_here grows (a moved vector keeps its buffer).
    read_here.push_back(std::move(bytes));
    items.push_back(PushItem{pushed.closure, pushed.run, {}});
    for (const std::string& input : read_here.back()) {
      items.back().inputs.push_back(kj::arrayPtr(input.data(), input.size()));
    }
  }
  if (!items.empty()) later.add(SendPushes(worker_id, items));
  return kj::joinPromises(later.releaseAsArray());
}

kj::Promise<void> ClosureDispatcher::SendPushes(uint64_t worker_id,
                                                const std::vector<PushItem>& items) {
  auto entry = live_.find(worker_id);
  rpc::WorkerControl::Client* control =
      entry == live_.end() ? nullptr : workers_.ControlOf(entry->second.address);
  if (control == nullptr) {
    std::vector<state::ClosureRun> runs;
    for (const PushItem& item : items) runs.push_back(item.run);
    PushFailed(worker_id, runs);
    return kj::READY_NOW;
  }
  // One runClosures per kMaxPushBytes of closures (at least one closure
  // each), so that a worker with many slots and large closures is never sent
  // a message past its limit.
  auto pushes = state::SplitIntoRecords(items.size(), 0, kMaxPushBytes, [&](size_t i) {
    const state::Closure& closure = *items[i].closure;
    uint64_t words = state::ScheduledItemWords(closure.function_name, closure.args.size(),
                                               closure.resources.size());
    for (kj::ArrayPtr<const char> input : items[i].inputs) words += 1 + (input.size() + 7) / 8;
    return words;
  });
  auto sends = kj::heapArrayBuilder<kj::Promise<void>>(pushes.size());
  for (auto [begin, end] : pushes) {
    OutgoingPush push(control->runClosuresRequest());
    auto list = push.request.initClosures(static_cast<unsigned>(end - begin));
    for (size_t i = begin; i < end; ++i) {
      auto item = list[static_cast<unsigned>(i - begin)];
      FillAssignment(item, items[i], entry->second, push);
      if (!items[i].inputs.empty()) {
        auto inputs = item.initInputs(static_cast<unsigned>(items[i].inputs.size()));
        for (unsigned j = 0; j < items[i].inputs.size(); ++j) {
          inputs.set(j, kj::arrayPtr(reinterpret_cast<const kj::byte*>(items[i].inputs[j].begin()),
                                     items[i].inputs[j].size()));
          counters_.input_bytes_pushed += items[i].inputs[j].size();
        }
      }
    }
    sends.add(Send(worker_id, kj::mv(push)));
  }
  // Their Finish messages go out with the calls just sent.
  entry->second.push_replies.clear();
  return kj::joinPromises(sends.finish());
}

void ClosureDispatcher::FillAssignment(rpc::ClosureAssignment::Builder item,
                                       const PushItem& from, const LiveEntry& entry,
                                       OutgoingPush& push) {
  const state::Closure& closure = *from.closure;
  item.setClosureId(closure.id);
  item.setAttempt(from.run.attempt);
  item.setFunction(closure.function_name);
  item.setArgs(state::AsData(closure.args));
  if (!traces_.empty() && traces_.Traced(closure.id)) {
    item.setTrace(true);
    push.traced.push_back(closure.id);
  }
  if (!closure.resources.empty()) {  // absent reads as empty
    auto resources = item.initResources(static_cast<unsigned>(closure.resources.size()));
    for (unsigned r = 0; r < closure.resources.size(); ++r) resources.set(r, closure.resources[r]);
  }
  for (uint64_t id : closure.resources) {
    // Those this connection has had already (SendResources) stay out: a
    // closure of many large resources still makes a small push.
    if (!entry.resources_sent.contains(id)) push.resource_ids.insert(id);
  }
  push.runs.push_back(from.run);
}

kj::Promise<void> ClosureDispatcher::Send(uint64_t worker_id, OutgoingPush push) {
  // Resources are never removed; looked up again all the same, since a push
  // whose inputs were copied in turns is sent some turns after it was built.
  std::vector<const state::PerWorkerResource*> resources;
  for (uint64_t id : push.resource_ids) {
    if (const state::PerWorkerResource* resource = state().FindResource(id)) resources.push_back(resource);
  }
  auto specs = push.request.initResources(static_cast<unsigned>(resources.size()));
  for (unsigned r = 0; r < resources.size(); ++r) FillResourceSpec(specs[r], *resources[r]);
  if (!push.traced.empty()) {
    const uint64_t now = uv_hrtime();
    for (uint64_t id : push.traced) traces_.Stamp(id, kTracePushed, now);
  }
  return push.request.send().then(
      [this, worker_id](auto&& reply) {
        auto held = live_.find(worker_id);
        if (held != live_.end()) held->second.push_replies.push_back(kj::mv(reply));
      },
      [this, worker_id, runs = kj::mv(push.runs)](kj::Exception&& e) {
        Log(LogLevel::kDebug, "runClosures to worker ", worker_id, " failed: ", e.getDescription());
        PushFailed(worker_id, runs);
      });
}

ClosureDispatcher::InputLocations ClosureDispatcher::LocateInputs(
    const std::vector<uint64_t>& inputs) const {
  InputLocations where;
  for (uint64_t id : inputs) {
    std::optional<storage::ResultLocation> location =
        durable_.results().LocateStoredResult(*state().FindClosure(id));
    if (!location.has_value()) {
      where.read_item.emplace_back(std::nullopt);
      continue;
    }
    where.read_item.emplace_back(where.locations.size());
    where.stored_bytes += location->size;
    where.locations.push_back(*location);
  }
  return where;
}

Status ClosureDispatcher::InputError(uint64_t closure_id, uint64_t input_id, const Status& status) {
  return Status(status.code(), "input closure " + std::to_string(input_id) + " of closure " +
                                   std::to_string(closure_id) + ": " + status.message());
}

void ClosureDispatcher::FailOnInputs(const state::ClosureRun& run, const Status& why) {
  Status failed = Carry(state::PlanUserError(state(), run, why.ToString(), Stamp()));
  if (!failed.ok()) Log(LogLevel::kWarning, "closure input: ", failed.ToString().c_str());
}

Result<std::vector<std::string>> ClosureDispatcher::ReadInputs(
    uint64_t closure_id, const std::vector<uint64_t>& inputs) {
  std::vector<std::string> out;
  out.reserve(inputs.size());
  for (uint64_t id : inputs) {
    Result<std::string> bytes = durable_.results().GetResult(*state().FindClosure(id));
    if (!bytes.ok()) return InputError(closure_id, id, bytes.status());
    out.push_back(std::move(*bytes));
  }
  return out;
}

kj::Promise<void> ClosureDispatcher::PushAfterReadingInputs(uint64_t worker_id,
                                                            state::ClosureRun run,
                                                            std::vector<uint64_t> inputs,
                                                            InputLocations where) {
  // The inputs not read on the pool are at hand now: inline, or put in this
  // pass and maybe a row by the time the read is back, so copied now.
  std::vector<Result<std::string>> at_hand;
  for (size_t k = 0; k < inputs.size(); ++k) {
    at_hand.push_back(where.read_item[k].has_value()
                          ? Result<std::string>(std::string())
                          : durable_.results().GetResult(*state().FindClosure(inputs[k])));
  }
  return durable_.results().ReadStoredResults(std::move(where.locations))
      .then(
          [this, worker_id, run, inputs = std::move(inputs), read_item = std::move(where.read_item),
           at_hand = std::move(at_hand)](
              std::unique_ptr<ResultReads::Done> done) mutable -> kj::Promise<void> {
            // Ended meanwhile (its worker lost, cancelled): its inputs are
            // not needed, and may be released already.
            const state::Closure* closure = state().FindRunning(run.closure_id, worker_id, run.attempt);
            if (closure == nullptr) return kj::READY_NOW;
            PushItem item{closure, run, {}};
            for (size_t k = 0; k < inputs.size(); ++k) {
              const uint64_t input_id = inputs[k];
              if (!read_item[k].has_value()) {
                if (!at_hand[k].ok()) {
                  FailOnInputs(run, InputError(run.closure_id, input_id, at_hand[k].status()));
                  return kj::READY_NOW;
                }
                item.inputs.push_back(kj::arrayPtr(at_hand[k]->data(), at_hand[k]->size()));
                continue;
              }
              const size_t i = *read_item[k];
              const uint64_t size = ResultStore::ResultSize(*state().FindClosure(input_id));
              // Held for its dependant.
              Status status = durable_.results().HeldResultRead(input_id, size, done->statuses[i]);
              if (!status.ok()) {
                FailOnInputs(run, InputError(run.closure_id, input_id, status));
                return kj::READY_NOW;
              }
              item.inputs.push_back(kj::arrayPtr(done->bytes.data() + done->offsets[i], size));
            }
            return SendWithInputsInTurns(worker_id, kj::mv(item))
                .attach(std::move(done), std::move(at_hand));
          },
          [this, worker_id, run](kj::Exception&& e) {
            // Stopping: the run is put back at the next start, as every
            // assigned one is.
            if (durable_.background_stopped()) return;
            // The pool refused the read: ended as a lost run, retried.
            Log(LogLevel::kWarning, "reading the inputs of closure ", run.closure_id,
                " failed: ", e.getDescription());
            PushFailed(worker_id, {run});
          });
}

kj::Promise<void> ClosureDispatcher::SendWithInputsInTurns(uint64_t worker_id, PushItem item) {
  auto entry = live_.find(worker_id);
  rpc::WorkerControl::Client* control =
      entry == live_.end() ? nullptr : workers_.ControlOf(entry->second.address);
  if (control == nullptr) {
    PushFailed(worker_id, {item.run});
    return kj::READY_NOW;
  }
  // A push of its own: its inputs alone may take most of kMaxPushBytes.
  OutgoingPush push(control->runClosuresRequest());
  auto assignment = push.request.initClosures(1)[0];
  FillAssignment(assignment, item, entry->second, push);
  auto inputs = assignment.initInputs(static_cast<unsigned>(item.inputs.size()));
  std::vector<PendingCopy> copies;
  for (unsigned j = 0; j < item.inputs.size(); ++j) {
    auto data = inputs.init(j, static_cast<unsigned>(item.inputs[j].size()));
    copies.push_back({reinterpret_cast<char*>(data.begin()), item.inputs[j].begin(),
                      item.inputs[j].size()});
    counters_.input_bytes_pushed += item.inputs[j].size();
  }
  return CopyInTurns(std::move(copies))
      .then([this, worker_id, run = item.run, push = kj::mv(push)]() mutable -> kj::Promise<void> {
        // Ended while its bytes were copied: not sent (a report of it would
        // be ignored anyway).
        if (state().FindRunning(run.closure_id, worker_id, run.attempt) == nullptr) {
          return kj::READY_NOW;
        }
        kj::Promise<void> sent = Send(worker_id, kj::mv(push));
        // Its Finish message goes out with the call just sent.
        auto held = live_.find(worker_id);
        if (held != live_.end()) held->second.push_replies.clear();
        return sent;
      });
}

void ClosureDispatcher::SendResources(uint64_t worker_id) {
  // Only committed resources: an id a crash could hand out again for another
  // resource must never reach a worker's cache.
  AddTask(durable_.pipeline().Barrier().then([this, worker_id]() -> kj::Promise<void> {
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
