#include "reactor/online_backup.h"

#include <kj/debug.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "common/log.h"

namespace dispatch::reactor {
namespace {

uint64_t ElapsedMicros(uint64_t since_ns) { return (uv_hrtime() - since_ns) / 1000; }

// True when `path` is `dir` or lies inside it, symbolic links resolved as
// far as the paths exist.
bool Within(const std::filesystem::path& path, const std::filesystem::path& dir) {
  std::error_code ec;
  const auto p = std::filesystem::weakly_canonical(path, ec);
  if (ec) return false;
  const auto d = std::filesystem::weakly_canonical(dir, ec);
  if (ec) return false;
  auto [end, unused] = std::mismatch(d.begin(), d.end(), p.begin(), p.end());
  (void)unused;
  return end == d.end();
}

}  // namespace

// The file work of phases 1 and 3, and the removal after a failure: the
// job owns everything it touches (PoolWork's rule).
struct OnlineBackup::FileJob final : public uvkj::PoolJob {
  enum class Kind { kPrepare, kComplete, kRemove };
  void Run() override {
    switch (kind) {
      case Kind::kPrepare:
        status = storage::PrepareBackupDir(target, &created);
        return;
      case Kind::kComplete: {
        auto done = storage::CompleteBackupDir(target, pinned, last_seq);
        if (done.ok()) {
          completed = *done;
        } else {
          status = done.status();
        }
        return;
      }
      case Kind::kRemove:
        storage::RemoveBackupDir(target, created);
        return;
    }
  }

  Kind kind = Kind::kPrepare;
  std::string target;
  bool created = false;  // kPrepare sets it; kRemove reads it
  storage::PinnedFiles pinned;
  uint64_t last_seq = 0;
  Status status;
  storage::CompletedBackup completed;
};

OnlineBackup::OnlineBackup(uv_loop_t* loop, storage::Store& store, OnlineBackupOptions options,
                           std::function<void(bool)> pause_checkpoints,
                           std::function<void()> on_idle)
    : loop_(loop),
      store_(store),
      options_(options),
      pause_checkpoints_(std::move(pause_checkpoints)),
      on_idle_(std::move(on_idle)),
      job_(loop) {}

OnlineBackup::~OnlineBackup() {
  stepping_ = nullptr;
  copy_.reset();
  if (caller_.get() != nullptr && caller_->isWaiting()) {
    caller_->fulfill(UnavailableError("the dispatcher stopped before the backup to " + target_ +
                                      " was complete"));
  }
}

kj::Promise<Result<BackupOutcome>> OnlineBackup::Start(const std::string& target) {
  if (stopped_) return Result<BackupOutcome>(UnavailableError("the dispatcher is shutting down"));
  if (running()) {
    return Result<BackupOutcome>(FailedPreconditionError(
        "a backup to " + target_ + " is running; one backup runs at a time"));
  }
  const std::filesystem::path path(target);
  if (target.empty() || !path.is_absolute()) {
    return Result<BackupOutcome>(InvalidArgumentError(
        "the backup's target directory must be an absolute path on the dispatcher's machine, "
        "got '" + target + "'"));
  }
  if (Within(path, store_.work_dir())) {
    return Result<BackupOutcome>(FailedPreconditionError(
        target + " is the work dir " + store_.work_dir() + " or inside it"));
  }
  target_ = path.lexically_normal().string();
  if (target_.size() > 1 && target_.back() == '/') target_.pop_back();
  created_target_ = false;
  start_ns_ = uv_hrtime();
  outcome_ = BackupOutcome{};
  outcome_.target = target_;
  ++stats_.started;
  phase_ = Phase::kPreparing;
  auto paf = kj::newPromiseAndFulfiller<Result<BackupOutcome>>();
  caller_ = kj::mv(paf.fulfiller);
  auto job = std::make_unique<FileJob>();
  job->kind = FileJob::Kind::kPrepare;
  job->target = target_;
  StartJob(std::move(job));
  return kj::mv(paf.promise);
}

void OnlineBackup::StartJob(std::unique_ptr<FileJob> job) {
  const FileJob::Kind kind = job->kind;
  const int rc = job_.Start(job, [this](std::unique_ptr<FileJob> done) { OnJobDone(std::move(done)); });
  if (rc == 0) return;
  // libuv refused the work: nothing of it ran.
  const Status refused =
      UnavailableError(std::string("the thread pool refused the backup's file work: ") + uv_strerror(rc));
  if (kind == FileJob::Kind::kRemove) {
    Log(LogLevel::kWarning, "cannot remove the failed backup in ", target_.c_str(), ": ",
        refused.ToString().c_str());
    Finish(removal_reason_);
    return;
  }
  Fail(refused, /*remove=*/kind == FileJob::Kind::kComplete);
}

void OnlineBackup::OnJobDone(std::unique_ptr<FileJob> job) {
  switch (job->kind) {
    case FileJob::Kind::kPrepare:
      OnPrepared(*job);
      break;
    case FileJob::Kind::kComplete:
      OnCompleted(*job);
      break;
    case FileJob::Kind::kRemove:
      Finish(removal_reason_);
      break;
  }
  on_idle_();
}

void OnlineBackup::OnPrepared(FileJob& job) {
  created_target_ = job.created;
  if (!job.status.ok()) {
    // PrepareBackupDir changed nothing, or undid what it did.
    Fail(job.status, /*remove=*/false);
    return;
  }
  if (stopped_) {
    Fail(UnavailableError("the dispatcher is shutting down"), /*remove=*/true);
    return;
  }
  auto copy = store_.StartBackup(target_ + "/" + storage::kPartialDatabaseName);
  if (!copy.ok()) {
    Fail(copy.status(), /*remove=*/true);
    return;
  }
  copy_ = std::move(copy).value();
  phase_ = Phase::kCopying;
  checkpoints_paused_ = true;
  pause_checkpoints_(true);
  stepping_ = StepTurns().eagerlyEvaluate([this](kj::Exception&& e) {
    Fail(InternalError("the backup's copy failed: " + std::string(e.getDescription().cStr())),
         /*remove=*/true);
  });
}

kj::Promise<void> OnlineBackup::StepTurns() {
  const uint64_t start = uv_hrtime();
  auto done = copy_->Step(static_cast<int>(options_.pages_per_step));
  ++outcome_.steps;

  outcome_.longest_step_micros = std::max(outcome_.longest_step_micros, ElapsedMicros(start));
  if (!done.ok()) {
    Fail(done.status(), /*remove=*/true);
    return kj::READY_NOW;
  }
  if (*done) {
    CopyComplete();
    return kj::READY_NOW;
  }
  // The rest on a later turn: what is queued (replies, the pass's commit)
  // runs first.
  return kj::evalLater([this]() { return StepTurns(); });
}

void OnlineBackup::CopyComplete() {
  outcome_.pages = static_cast<uint64_t>(copy_->page_count());
  copy_.reset();
  checkpoints_paused_ = false;
  pause_checkpoints_(false);
  if (store_.failed()) {
    Fail(store_.failure(), /*remove=*/true);
    return;
  }
  // The copy ends with the Store's last commit: its record and the snapshot
  // the database names now are the copy's, and no file the copy needs can
  // be removed before this turn ends.
  outcome_.last_seq = store_.last_seq();
  const std::string snapshot =
      store_.latest_snapshot().has_value() ? store_.latest_snapshot()->name : std::string();
  auto pinned =
      storage::PinWorkDirFiles(store_.work_dir(), snapshot, target_, options_.max_copied_files);
  if (!pinned.ok()) {
    Fail(pinned.status(), /*remove=*/true);
    return;
  }
  outcome_.files_linked = pinned->linked();
  outcome_.files_copied = pinned->opened();
  phase_ = Phase::kCompleting;
  auto job = std::make_unique<FileJob>();
  job->kind = FileJob::Kind::kComplete;
  job->target = target_;
  job->pinned = std::move(pinned).value();
  job->last_seq = outcome_.last_seq;
  StartJob(std::move(job));
}

void OnlineBackup::OnCompleted(FileJob& job) {
  if (!job.status.ok()) {
    Fail(job.status, /*remove=*/true);
    return;
  }
  outcome_.database_bytes = job.completed.database_bytes;
  outcome_.copied_bytes = job.completed.copied_bytes;
  outcome_.total_micros = ElapsedMicros(start_ns_);
  ++stats_.completed;
  Log(LogLevel::kInfo, "backup to ", target_.c_str(), " complete: journal up to record ",
      outcome_.last_seq, ", ", outcome_.database_bytes, " bytes of database copied in ",
      outcome_.steps, " steps of at most ", options_.pages_per_step, " pages (the longest took ",
      outcome_.longest_step_micros, " us), ", outcome_.files_linked, " files linked, ",
      outcome_.files_copied, " copied (", outcome_.copied_bytes, " bytes), in ",
      outcome_.total_micros / 1000, " ms");
  Finish(outcome_);
}

void OnlineBackup::Fail(Status status, bool remove) {
  copy_.reset();
  if (checkpoints_paused_) {
    checkpoints_paused_ = false;
    pause_checkpoints_(false);
  }
  ++stats_.failed;
  Log(LogLevel::kWarning, "backup to ", target_.c_str(), " failed",
      remove ? " (removing what it wrote)" : "", ": ", status.ToString().c_str());
  if (!remove) {
    Finish(std::move(status));
    return;
  }
  removal_reason_ = std::move(status);
  phase_ = Phase::kRemoving;
  auto job = std::make_unique<FileJob>();
  job->kind = FileJob::Kind::kRemove;
  job->target = target_;
  job->created = created_target_;
  StartJob(std::move(job));
}

void OnlineBackup::Finish(Result<BackupOutcome> result) {
  phase_ = Phase::kIdle;
  removal_reason_ = Status::Ok();
  if (caller_.get() != nullptr && caller_->isWaiting()) caller_->fulfill(std::move(result));
  caller_ = nullptr;
}

void OnlineBackup::Stop() {
  stopped_ = true;
  if (phase_ != Phase::kCopying) return;
  // Not inside a step: Stop runs from the shutdown's continuation.
  stepping_ = nullptr;
  Fail(UnavailableError("the dispatcher is shutting down: the backup to " + target_ +
                        " was abandoned"),
       /*remove=*/true);
}

}  // namespace dispatch::reactor
