#include "state/closure_updates.h"

#include <kj/debug.h>

#include <algorithm>

#include "state/codec.h"
#include "state/record_budget.h"

namespace dispatch::state {

journal::Update::Builder UpdateList::Add(int64_t time_micros, uint64_t words) {
  messages_.push_back(words == 0 ? std::make_unique<capnp::MallocMessageBuilder>()
                                 : std::make_unique<capnp::MallocMessageBuilder>(
                                       static_cast<unsigned>(std::min<uint64_t>(words, 1u << 28))));
  auto update = messages_.back()->initRoot<journal::Update>();
  update.setTimeMicros(time_micros);
  return update;
}

void UpdateList::Append(UpdateList&& other) {
  for (auto& message : other.messages_) messages_.push_back(std::move(message));
  other.messages_.clear();
}

journal::Update::Reader UpdateList::operator[](size_t i) const {
  KJ_REQUIRE(i < messages_.size(), "update index out of range", i, messages_.size());
  return messages_[i]->getRoot<journal::Update>().asReader();
}

std::optional<std::string> UpdateList::EncodedIfOneSegment(size_t i) const {
  KJ_REQUIRE(i < messages_.size(), "update index out of range", i, messages_.size());
  if (messages_[i]->getSegmentsForOutput().size() != 1) return std::nullopt;
  return EncodeMessage(*messages_[i]);
}

void AddScheduled(UpdateList& out, const Stamp& stamp, uint64_t coordinator_id,
                  const std::vector<NewClosure>& closures) {
  auto words = [&](size_t k) {
    const NewClosure& c = closures[k];
    return ScheduledItemWords(std::string_view(c.function.cStr(), c.function.size()), c.args.size(),
                              c.resources.size() + c.inputs.size());
  };
  for (auto [begin, end] : SplitIntoRecords(closures.size(), ClosureBatchOverheadWords(),
                                            stamp.max_record_bytes, words)) {
    uint64_t record_words = ClosureBatchOverheadWords();
    for (size_t k = begin; k < end; ++k) record_words += words(k);
    auto list = out.Add(stamp.time_micros, record_words)
                    .initClosureBatch()
                    .initScheduled(static_cast<unsigned>(end - begin));
    for (size_t k = begin; k < end; ++k) {
      const NewClosure& c = closures[k];
      auto item = list[static_cast<unsigned>(k - begin)];
      item.setClosureId(c.closure_id);
      item.setCoordinatorId(coordinator_id);
      item.setFunctionName(c.function);
      item.setArgs(c.args);
      item.setRequestId(c.request_id);
      if (c.resources.size() > 0) item.setResources(c.resources);  // absent reads as empty
      item.setPriority(c.priority);
      item.setDeadlineMicros(c.deadline_micros);
      if (!c.inputs.empty()) {
        auto inputs = item.initInputs(static_cast<unsigned>(c.inputs.size()));
        for (unsigned j = 0; j < c.inputs.size(); ++j) inputs.set(j, c.inputs[j]);
      }
    }
  }
}

void AddAssigned(UpdateList& out, const Stamp& stamp, const std::vector<ClosureRun>& runs) {
  for (auto [begin, end] :
       SplitByCount(runs.size(), AssignmentsPerRecord(stamp.max_record_bytes))) {
    auto list = out.Add(stamp.time_micros,
                        ClosureBatchOverheadWords() +
                            (end - begin) * capnp::sizeInWords<journal::ClosureAssigned>())
                    .initClosureBatch()
                    .initAssigned(static_cast<unsigned>(end - begin));
    for (size_t i = begin; i < end; ++i) {
      auto item = list[static_cast<unsigned>(i - begin)];
      item.setClosureId(runs[i].closure_id);
      item.setWorkerId(runs[i].worker_id);
      item.setAttempt(runs[i].attempt);
    }
  }
}

void AddFinished(UpdateList& out, const Stamp& stamp, const std::vector<StoredResult>& results) {
  for (auto [begin, end] : SplitByCount(results.size(), kMaxFinishedPerRecord)) {
    auto list = out.Add(stamp.time_micros,
                        ClosureBatchOverheadWords() +
                            (end - begin) * capnp::sizeInWords<journal::ClosureFinished>())
                    .initClosureBatch()
                    .initFinished(static_cast<unsigned>(end - begin));
    for (size_t i = begin; i < end; ++i) {
      auto item = list[static_cast<unsigned>(i - begin)];
      item.setClosureId(results[i].run.closure_id);
      item.setWorkerId(results[i].run.worker_id);
      item.setAttempt(results[i].run.attempt);
      item.setResultStored(true);
      item.setResultSize(results[i].size);
      item.setResultCrc(results[i].crc);
    }
  }
}

namespace {

enum class IdList { kCancelled, kReleased };

void AddIds(UpdateList& out, const Stamp& stamp, const std::vector<uint64_t>& ids, IdList which) {
  for (auto [begin, end] : SplitByCount(ids.size(), IdsPerRecord(stamp.max_record_bytes))) {
    const auto n = static_cast<unsigned>(end - begin);
    auto batch = out.Add(stamp.time_micros, ClosureBatchOverheadWords() + n).initClosureBatch();
    auto list = which == IdList::kCancelled ? batch.initCancelled(n) : batch.initReleased(n);
    for (size_t i = begin; i < end; ++i) list.set(static_cast<unsigned>(i - begin), ids[i]);
  }
}

}  // namespace

void AddCancelled(UpdateList& out, const Stamp& stamp, const std::vector<uint64_t>& closure_ids) {
  AddIds(out, stamp, closure_ids, IdList::kCancelled);
}

void AddReleased(UpdateList& out, const Stamp& stamp, const std::vector<uint64_t>& closure_ids) {
  AddIds(out, stamp, closure_ids, IdList::kReleased);
}

void AddFailed(UpdateList& out, const Stamp& stamp, const ClosureRun& run, std::string_view error,
               FailureKind kind) {
  auto failed = out.Add(stamp.time_micros).initClosureFailed();
  failed.setClosureId(run.closure_id);
  failed.setWorkerId(run.worker_id);
  failed.setAttempt(run.attempt);
  failed.setError(capnp::Text::Reader(error.data(), error.size()));
  failed.setUserError(kind == FailureKind::kUserError);
  failed.setInfrastructure(kind == FailureKind::kInfrastructure);
  failed.setDeadlineExceeded(kind == FailureKind::kDeadlineExceeded);
}

void AddPutBack(UpdateList& out, const Stamp& stamp, const ClosureRun& run, bool transient) {
  auto put_back = out.Add(stamp.time_micros).initClosurePutBack();
  put_back.setClosureId(run.closure_id);
  put_back.setWorkerId(run.worker_id);
  put_back.setAttempt(run.attempt);
  put_back.setTransient(transient);
}

void AddResourceCreated(UpdateList& out, const Stamp& stamp, uint64_t resource_id,
                        uint64_t coordinator_id, std::string_view function, std::string_view args,
                        uint64_t request_id) {
  auto created = out.Add(stamp.time_micros).initResourceCreated();
  created.setResourceId(resource_id);
  created.setCoordinatorId(coordinator_id);
  created.setFunctionName(capnp::Text::Reader(function.data(), function.size()));
  created.setArgs(
      capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(args.data()), args.size()));
  created.setRequestId(request_id);
}

void AddErrorCleared(UpdateList& out, const Stamp& stamp, uint64_t coordinator_id) {
  out.Add(stamp.time_micros).initCoordinatorErrorCleared().setCoordinatorId(coordinator_id);
}

}  // namespace dispatch::state
