#include "reactor/snapshot_replica.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <exception>
#include <optional>
#include <utility>

#include "state/codec.h"

namespace dispatch::reactor {

struct SnapshotReplica::Task final : public uvkj::PoolJob {
  void Run() override;  // on a thread-pool thread

  DoneFn done;
  // In: what the thread may touch, and nothing else.
  std::unique_ptr<state::DispatcherState> replica;  // null: start from `seed`
  uint64_t replica_seq = 0;
  std::optional<storage::SnapshotFileInfo> seed;  // nullopt: the empty state
  std::unique_ptr<storage::JournalReader> reader;
  std::unique_ptr<state::SnapshotEncoder> encoder;
  std::string work_dir;
  uint64_t max_bytes = 0;
  uint64_t target_seq = 0;
  uint64_t target_num_applied = 0;
  SnapshotFault fault = SnapshotFault::kNone;
  // Out.
  SnapshotOutcome outcome;
};

Result<std::unique_ptr<SnapshotReplica>> SnapshotReplica::Create(uv_loop_t* loop,
                                                                storage::Store& store) {
  auto reader = store.NewJournalReader();
  if (!reader.ok()) return reader.status();
  return std::unique_ptr<SnapshotReplica>(
      new SnapshotReplica(loop, store, std::move(reader).value()));
}

SnapshotReplica::SnapshotReplica(uv_loop_t* loop, storage::Store& store,
                                 std::unique_ptr<storage::JournalReader> reader)
    : loop_(loop), store_(store), reader_(std::move(reader)), task_(loop) {}

SnapshotReplica::~SnapshotReplica() {
  if (priming_.joinable()) priming_.join();
}

void SnapshotReplica::StartPriming(std::shared_ptr<const std::string> snapshot,
                                   uint64_t snapshot_seq, uint64_t through_seq) {
  if (priming_.joinable() || task_.in_flight()) return;
  priming_ = std::thread([this, snapshot = std::move(snapshot), snapshot_seq, through_seq]() {
    try {
      std::unique_ptr<state::DispatcherState> replica;
      if (snapshot != nullptr) {
        auto decoded = state::DecodeSnapshot(*snapshot);
        if (!decoded.ok()) {
          priming_status_ = decoded.status();
          return;
        }
        replica = std::make_unique<state::DispatcherState>(std::move(decoded).value());
      } else {
        replica = std::make_unique<state::DispatcherState>();
      }
      uint64_t at = snapshot_seq;
      priming_status_ = reader_->Read(snapshot_seq, through_seq,
                                      [&](uint64_t seq, std::string_view bytes) -> Status {
                                        DISPATCH_RETURN_IF_ERROR(
                                            state::ApplyEncodedUpdate(*replica, bytes));
                                        at = seq;
                                        return Status::Ok();
                                      });
      if (!priming_status_.ok()) return;
      primed_ = std::move(replica);
      primed_seq_ = at;
    } catch (const std::exception& e) {
      priming_status_ = InternalError(std::string("priming the snapshot replica failed: ") + e.what());
    }
  });
}

Status SnapshotReplica::FinishPriming(uint64_t num_applied) {
  if (!priming_.joinable()) return FailedPreconditionError("the snapshot replica was not primed");
  priming_.join();
  if (!priming_status_.ok()) return priming_status_;
  if (primed_ == nullptr || primed_->NumApplied() != num_applied) {
    primed_.reset();
    return InternalError("the primed snapshot replica does not match the recovered state");
  }
  replica_ = std::move(primed_);
  replica_seq_ = primed_seq_;
  return Status::Ok();
}

void SnapshotReplica::Cancel() {
  if (task_.in_flight()) task_.job().Cancel();
}

void SnapshotReplica::Invalidate() {
  if (task_.in_flight()) invalidated_in_flight_ = true;
  replica_.reset();
  replica_seq_ = 0;
}

Status SnapshotReplica::Start(uint64_t seq, uint64_t num_applied, DoneFn done) {
  if (task_.in_flight()) return FailedPreconditionError("a snapshot task is still running");
  auto task = std::make_unique<Task>();
  task->done = std::move(done);
  // The records up to the recorded snapshot may be truncated already: a
  // replica behind it starts over from that snapshot's file.
  if (replica_ == nullptr || replica_seq_ < store_.snapshot_seq() || replica_seq_ > seq) {
    replica_.reset();
    task->seed = store_.latest_snapshot();
    task->replica_seq = task->seed.has_value() ? task->seed->seq : 0;
  } else {
    task->replica = std::move(replica_);
    task->replica_seq = replica_seq_;
  }
  task->reader = std::move(reader_);
  task->encoder = std::move(encoder_);
  task->work_dir = store_.work_dir();
  task->max_bytes = store_.options().max_snapshot_bytes;
  task->target_seq = seq;
  task->target_num_applied = num_applied;
  task->fault = fault_;
  task->outcome.started_ns = uv_hrtime();
  task->outcome.info.seq = seq;
  const int rc =
      task_.Start(task, [this](std::unique_ptr<Task> done_task) { Finish(std::move(done_task)); });
  if (rc < 0) {
    replica_ = std::move(task->replica);
    reader_ = std::move(task->reader);
    encoder_ = std::move(task->encoder);
    return UnavailableError(std::string("cannot queue the snapshot task: ") + uv_strerror(rc));
  }
  return Status::Ok();
}

namespace {

// Lowers this thread's priority while it lives: on a small machine the loop
// thread must win the CPU over the snapshot. Linux nice values are per
// thread. Restoring may be refused without CAP_SYS_NICE; then the pool
// thread stays nicer, which only slows other background work.
class NiceThread {
 public:
  NiceThread() : tid_(static_cast<id_t>(syscall(SYS_gettid))) {
    errno = 0;
    const int before = getpriority(PRIO_PROCESS, tid_);
    if (errno == 0 && before < kNice) {
      before_ = before;
      setpriority(PRIO_PROCESS, tid_, kNice);
    }
  }
  ~NiceThread() {
    if (before_ != kNice) setpriority(PRIO_PROCESS, tid_, before_);
  }

 private:
  static constexpr int kNice = 10;
  const id_t tid_;
  int before_ = kNice;
};

}  // namespace

void SnapshotReplica::Task::Run() {
  Task& task = *this;
  NiceThread nice;
  SnapshotOutcome& out = task.outcome;
  const uint64_t start = uv_hrtime();
  auto cancelled = [&]() { return task.cancelled(); };
  const Status kCancelled = UnavailableError("the snapshot was cancelled (shutdown)");
  try {
    if (task.replica == nullptr) {
      if (task.seed.has_value()) {
        auto bytes = storage::ReadSnapshotFile(task.work_dir, *task.seed);
        if (!bytes.ok()) {
          out.status = bytes.status();
          return;
        }
        auto decoded = state::DecodeSnapshot(*bytes);
        if (!decoded.ok()) {
          out.status = DataLossError("snapshot file " + task.seed->name + ": " +
                                     decoded.status().message());
          return;
        }
        task.replica = std::make_unique<state::DispatcherState>(std::move(decoded).value());
      } else {
        task.replica = std::make_unique<state::DispatcherState>();
      }
    }
    Status read = task.reader->Read(
        task.replica_seq, task.target_seq, [&](uint64_t seq, std::string_view bytes) -> Status {
          if ((seq & 1023) == 0 && cancelled()) return kCancelled;
          Status applied = state::ApplyEncodedUpdate(*task.replica, bytes);
          if (!applied.ok()) {
            return InternalError("journal record " + std::to_string(seq) +
                                 " does not apply to the snapshot replica: " + applied.ToString());
          }
          task.replica_seq = seq;
          ++out.records_applied;
          return Status::Ok();
        });
    out.catch_up_micros = (uv_hrtime() - start) / 1000;
    if (!read.ok()) {
      out.status = read;
      return;
    }
    if (task.replica->NumApplied() != task.target_num_applied) {
      out.status = InternalError(
          "the snapshot replica at record " + std::to_string(task.target_seq) + " has applied " +
          std::to_string(task.replica->NumApplied()) + " updates, the live state " +
          std::to_string(task.target_num_applied));
      return;
    }
    if (cancelled()) {
      out.status = kCancelled;
      return;
    }
    if (task.fault == SnapshotFault::kFailBeforeWriting) {
      out.status = UnavailableError("injected fault before writing");
      return;
    }
    const uint64_t write_start = uv_hrtime();
    std::string_view bytes = task.encoder->Encode(*task.replica);
    if (bytes.size() > task.max_bytes) {
      out.status = ResourceExhaustedError(
          "snapshot at record " + std::to_string(task.target_seq) + " is " +
          std::to_string(bytes.size()) + " bytes, over the limit of " + std::to_string(task.max_bytes));
      return;
    }
    auto info = storage::WriteSnapshotFile(task.work_dir, task.target_seq, bytes);
    out.write_micros = (uv_hrtime() - write_start) / 1000;
    if (!info.ok()) {
      out.status = info.status();
      return;
    }
    out.info = *info;
    if (task.fault == SnapshotFault::kFailAfterWriting) {
      out.status = UnavailableError("injected fault after writing " + info->name);
    }
  } catch (const std::exception& e) {
    out.status = InternalError(std::string("the snapshot task failed: ") + e.what());
  }
}

void SnapshotReplica::Finish(std::unique_ptr<Task> owned) {
  Task& task = *owned;
  reader_ = std::move(task.reader);
  encoder_ = std::move(task.encoder);
  const bool caught_up = task.replica != nullptr && task.replica_seq == task.target_seq &&
                         task.replica->NumApplied() == task.target_num_applied;
  // Keep the replica only when nothing casts doubt on it.
  if (caught_up && !invalidated_in_flight_) {
    replica_ = std::move(task.replica);
    replica_seq_ = task.replica_seq;
  } else {
    replica_.reset();
    replica_seq_ = 0;
  }
  invalidated_in_flight_ = false;
  SnapshotOutcome outcome = std::move(task.outcome);
  outcome.total_micros = (uv_hrtime() - outcome.started_ns) / 1000;
  if (task.done) task.done(std::move(outcome));
}

}  // namespace dispatch::reactor
