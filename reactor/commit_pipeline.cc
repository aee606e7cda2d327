#include "reactor/commit_pipeline.h"

#include <capnp/dynamic.h>
#include <capnp/message.h>
#include <kj/debug.h>

#include <algorithm>

#include "common/log.h"
#include "common/rpc_status.h"
#include "state/codec.h"

namespace dispatch::reactor {
namespace {

// The variant's name, e.g. "registerWorker" or "closureBatch.scheduled".
std::string UpdateKind(journal::Update::Reader update) {
  std::string kind = "invalid";
  KJ_IF_MAYBE (field, capnp::toDynamic(update).which()) {
    kind = field->getProto().getName().cStr();
  }
  if (update.isClosureBatch()) {
    KJ_IF_MAYBE (field, capnp::toDynamic(update.getClosureBatch()).which()) {
      kind += std::string(".") + field->getProto().getName().cStr();
    }
  }
  return kind;
}

}  // namespace

std::string EncodeUpdate(journal::Update::Reader update) {
  capnp::MallocMessageBuilder message(update.totalSize().wordCount + 1);
  message.setRoot(update);
  return state::EncodeMessage(message);
}

CommitPipeline::CommitPipeline(storage::JournalWriter& journal, const Clock& clock,
                               CommitPipelineOptions options, state::DispatcherState state)
    : journal_(journal), clock_(clock), options_(std::move(options)), state_(std::move(state)) {}

int64_t CommitPipeline::NowMicros() const {
  return std::max(clock_.WallMicros(), state_.LastTimeMicros());
}

// ---- Submitting ---------------------------------------------------------------

Status CommitPipeline::Submit(journal::Update::Reader update) {
  return SubmitRecord(update, EncodeUpdate(update));
}

Status CommitPipeline::Submit(journal::Update::Reader update, std::string bytes) {
  // A builder's message may hold unused space that a copy would not; the
  // planners' budgets are exact for the copy.
  if (bytes.size() > max_record_bytes()) bytes = EncodeUpdate(update);
  return SubmitRecord(update, std::move(bytes));
}

Status CommitPipeline::SubmitRecord(journal::Update::Reader update, std::string bytes) {
  if (failed()) return failure_;
  for (DurabilityStage* stage : stages_) DISPATCH_RETURN_IF_ERROR(stage->Admit());
  // Sized before anything else: an update no journal record can hold is
  // refused here and changes nothing. The journal checks again at commit,
  // as a last line that input never reaches.
  Status fits = CheckRecordBytes(update, bytes.size());
  if (!fits.ok()) {
    ++stats_.refused_for_size;
    return fits;
  }
  DISPATCH_RETURN_IF_ERROR(MakeRoom(bytes.size()));
  // Apply checks first and changes nothing on error; only an applied update
  // is journaled, and both happen before the pass's commit.
  // Effects only when someone reads them: a pipeline without observers
  // (tools, some tests) applies as replay does.
  state::Effects* effects =
      applied_observers_.empty() && !testing_.unjournaled_release ? nullptr : &effects_;
  DISPATCH_RETURN_IF_ERROR(state_.Apply(update, effects));
  if (!(testing_.unjournaled_release && !effects_.released.empty())) {
    batch_.AddRecord(std::move(bytes));
  }
  if (effects != nullptr && !effects_.empty()) {
    notifying_ = true;
    KJ_DEFER(notifying_ = false);
    for (const auto& [id, observer] : applied_observers_) observer(effects_);
  }
  return Status::Ok();
}

CommitPipeline::ObserverId CommitPipeline::AddAppliedObserver(
    std::function<void(const state::Effects&)> observer) {
  KJ_REQUIRE(!notifying_, "an applied observer added from an applied observer");
  const ObserverId id = next_observer_id_++;
  applied_observers_.emplace_back(id, std::move(observer));
  return id;
}

void CommitPipeline::RemoveAppliedObserver(ObserverId id) {
  KJ_REQUIRE(!notifying_, "an applied observer removed from an applied observer");
  std::erase_if(applied_observers_, [id](const auto& entry) { return entry.first == id; });
}

Status CommitPipeline::CheckRecordBytes(journal::Update::Reader update, size_t bytes) const {
  if (bytes <= max_record_bytes()) return Status::Ok();
  return ResourceExhaustedError("update " + UpdateKind(update) + " of " + std::to_string(bytes) +
                                " bytes does not fit a journal record (limit " +
                                std::to_string(max_record_bytes()) + " bytes" +
                                options_.record_limit_reason + "); nothing was changed");
}

Status CommitPipeline::CheckFits(journal::Update::Reader update) const {
  return CheckRecordBytes(update, EncodeUpdate(update).size());
}

Status CommitPipeline::MakeRoom(size_t bytes) {
  if (batch_.empty() || batch_.payload_bytes() + bytes <= options_.max_batch_bytes) {
    return Status::Ok();
  }
  // Replies parked on what is in the batch are released by this commit; a
  // hold (closure reports) only ever delays a commit, never merges two, and
  // a closed gate never lets the batch pass its bound.
  ++stats_.early_commits;
  CommitNow();
  return failure_;
}

void CommitPipeline::ReplaceState(state::DispatcherState state) {
  KJ_REQUIRE(batch_.empty(), "the state replaced with updates pending");
  state_ = std::move(state);
}

// ---- Replies ------------------------------------------------------------------

kj::Promise<void> CommitPipeline::Barrier() {
  if (failed()) return ExceptionFromStatus(failure_);
  if (testing_.reply_before_commit) return kj::READY_NOW;
  if (!batch_.empty()) return batch_waiters_.Wait();
  // Everything is written: the caller may have observed any of it.
  if (DurableThrough() >= written_) return kj::READY_NOW;
  return LastWriteGroup().Wait();
}

void CommitPipeline::WhenDurable(kj::Function<void()> action) {
  if (failed()) return;
  if (testing_.reply_before_commit) {
    action();
    return;
  }
  if (!batch_.empty()) {
    batch_waiters_.WhenDurable(kj::mv(action));
    return;
  }
  WhenWrittenDurable(kj::mv(action));
}

void CommitPipeline::WhenWrittenDurable(kj::Function<void()> action) {
  if (failed()) return;
  if (DurableThrough() >= written_) {
    action();
    return;
  }
  LastWriteGroup().WhenDurable(kj::mv(action));
}

DurableWaiters& CommitPipeline::LastWriteGroup() {
  if (waiting_.empty() || waiting_.back().first != written_) {
    waiting_.emplace_back(written_, DurableWaiters());
  }
  return waiting_.back().second;
}

void CommitPipeline::NoteOtherWrite(DurableWaiters group) {
  if (failed()) return;
  NoteWrite(kj::mv(group), nullptr, 0);
}

void CommitPipeline::NoteWrite(DurableWaiters group, const JournalBatch* batch,
                               uint64_t first_seq) {
  ++written_;
  // Queued before any stage hears of the write: one may pass it at once
  // (an fsync on the loop, a replicated journal with nothing in flight).
  if (!group.empty()) waiting_.emplace_back(written_, kj::mv(group));
  for (DurabilityStage* stage : stages_) {
    stage->Written(written_, batch, first_seq);
    if (failed()) return;
  }
  ReleaseDurable();
}

uint64_t CommitPipeline::DurableThrough() const {
  uint64_t through = written_;
  for (const DurabilityStage* stage : stages_) through = std::min(through, stage->durable());
  return through;
}

void CommitPipeline::ReleaseDurable() {
  if (failed()) return;
  const uint64_t through = DurableThrough();
  while (!waiting_.empty() && waiting_.front().first <= through) {
    DurableWaiters group = kj::mv(waiting_.front().second);
    waiting_.pop_front();
    group.Fulfill();
  }
}

void CommitPipeline::AddStage(DurabilityStage* stage) {
  KJ_REQUIRE(written_ == 0, "a durability stage added after the first write");
  stage->SetListener(&stage_listener_);
  stages_.push_back(stage);
}

// ---- Committing ---------------------------------------------------------------

void CommitPipeline::HoldCommit(uint64_t micros) {
  if (hold_deadline_ns_ != 0 || micros == 0) return;
  hold_deadline_ns_ = clock_.MonotonicNanos() + micros * 1000;
  if (hold_timer_) hold_timer_(true);
}

void CommitPipeline::CommitPass() {
  if (hold_deadline_ns_ != 0) {
    if (clock_.MonotonicNanos() < hold_deadline_ns_) return;
    ReleaseHold();
  }
  if (failed() || batch_.empty()) {
    if (hold_timer_) hold_timer_(false);
    return;
  }
  // The gate's opening commits (its owner calls CommitPass).
  if (gate_closed_ && gate_closed_()) return;
  CommitBatch();
}

void CommitPipeline::CommitNow() {
  ReleaseHold();
  if (gate_closed_ && gate_closed_() && gate_overridden_) gate_overridden_();
  if (!failed() && !batch_.empty()) CommitBatch();
}

void CommitPipeline::CommitBatch() {
  if (hold_timer_) hold_timer_(false);
  const size_t records = batch_.record_count();
  const uint64_t first_seq = journal_.last_seq() + 1;
  const uint64_t commit_start = clock_.MonotonicNanos();
  Result<uint64_t> committed = journal_.Commit(batch_);
  if (!committed.ok()) {
    if (!journal_.failed()) {
      // The journal refused the batch as input and wrote nothing; it is
      // still usable. Submit sized every record and the stores check what
      // they put, so this is a bug of ours: the state holds updates the
      // journal refused, so nothing more may be acknowledged.
      FailStop(InternalError("BUG: the journal refused a batch as input after it was applied: " +
                             committed.status().ToString()));
      return;
    }
    FailStop(committed.status());
    return;
  }
  const uint64_t commit_end = clock_.MonotonicNanos();
  last_commit_start_ns_ = commit_start;
  last_commit_end_ns_ = commit_end;
  ++stats_.commits;
  commit_seconds_.Observe(static_cast<double>(commit_end - commit_start) * 1e-9);
  records_per_commit_.Observe(static_cast<double>(records));
  stats_.records += records;
  stats_.max_batch = std::max<uint64_t>(stats_.max_batch, records);
  // The replies leave once every stage has passed this write (at once
  // when there is none: a journal that syncs itself).
  NoteWrite(kj::mv(batch_waiters_), &batch_, first_seq);
  batch_.Clear();
  if (failed()) return;
  for (const auto& listener : batch_listeners_) listener();
}

// ---- Failure ------------------------------------------------------------------

void CommitPipeline::FailStop(const Status& status, const char* what) {
  if (failed()) return;
  failure_ = status;
  Log(LogLevel::kError, what, ", stopping (fail-stop): ", status.ToString().c_str());
  // The parked replies learn the truth; nothing after this is acknowledged.
  batch_waiters_.Reject(status);
  for (auto& [write, group] : waiting_) group.Reject(status);
  waiting_.clear();
  for (DurabilityStage* stage : stages_) stage->Fail(status);
  batch_.Clear();
  for (const auto& listener : batch_listeners_) listener();
  if (on_fatal_) on_fatal_(status);
}

}  // namespace dispatch::reactor
