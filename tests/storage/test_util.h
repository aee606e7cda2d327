// Shared helpers of the storage tests: temporary work dirs that clean up after
// themselves, the seed of randomised tests (DISPATCH_TEST_SEED), deterministic
// record payloads, and a child process with a line-oriented pipe that is read
// with a deadline (tests poll conditions; they never sleep to wait).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "storage/store.h"

namespace dispatch::storage::testing {

// Options for a store in `dir` with everything else at its default.
StoreOptions OptionsFor(const std::string& dir, Synchronous sync = Synchronous::kFull);

// Every record after `after_seq`, in replay order, or the replay's error.
using Records = std::vector<std::pair<uint64_t, std::string>>;
Result<Records> ReplayAll(Store& store, uint64_t after_seq);

// A batch of RecordPayload(first) .. RecordPayload(first + count - 1).
JournalBatch PayloadBatch(uint64_t first, int count);

// The reactor's checkpoint protocol with a std::thread standing in for
// uv_queue_work: Poll() after each commit on the "loop" thread finishes a
// checkpoint that completed (Store::FinishCheckpoint) and starts one when the
// Store wants it; at most one runs at a time.
class ThreadedCheckpoints {
 public:
  ThreadedCheckpoints(Store& store, Checkpointer& checkpointer)
      : store_(store), checkpointer_(checkpointer) {}
  ThreadedCheckpoints(const ThreadedCheckpoints&) = delete;
  ThreadedCheckpoints& operator=(const ThreadedCheckpoints&) = delete;
  ~ThreadedCheckpoints() {
    if (worker_.joinable()) worker_.join();
  }

  // The first error of a checkpoint or of FinishCheckpoint, else ok.
  Status Poll();
  // Waits for a running checkpoint and finishes it.
  Status Drain();

  int started() const { return started_; }
  int inline_passes() const { return inline_passes_; }

 private:
  Status Finish();

  Store& store_;
  Checkpointer& checkpointer_;
  std::thread worker_;
  std::atomic<bool> running_{false};
  Result<CheckpointStats> result_ = CheckpointStats();  // written by the worker
  int started_ = 0;
  int inline_passes_ = 0;
};

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();
  const std::string& path() const { return path_; }
  // A path inside the dir (not created).
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The seed for a randomised test: DISPATCH_TEST_SEED if set, else random.
// Prints it so a failure can be reproduced.
uint64_t TestSeed(const char* test_name);

// The journal record the crash and damage tests write at `seq`: its length
// (1..2000 bytes) and content depend only on seq, so a reader can check it.
std::string RecordPayload(uint64_t seq);
// The snapshot written at `seq`, likewise.
std::string SnapshotPayload(uint64_t seq);
// The dataset definition stored under `key`.
std::string DatasetPayload(const std::string& key);

// A helper process started with execv; its stdout is a pipe we read in lines.
class ChildProcess {
 public:
  // Starts `path` with `args` (argv[1..]). Aborts the test binary on fork failure.
  ChildProcess(const std::string& path, const std::vector<std::string>& args);
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills (SIGKILL) and reaps the child if it is still running.
  ~ChildProcess();

  // The next line (without '\n'), or nullopt at EOF or when `timeout` passes.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout);
  void Kill(int signal);
  // Waits for the child to exit; returns the raw waitpid status.
  int Wait();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool reaped_ = false;
  std::string buffer_;
};

// Path of the storage_test_helper executable (set by CMake).
std::string HelperPath();

// Reads/writes whole files; the damage tests edit bytes directly.
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& bytes);

// Names of the snapshot files (final and temporary) in `dir`, sorted.
std::vector<std::string> SnapshotFilesIn(const std::string& dir);

// Runs `sql` on a raw connection of its own (the damage tests' second writer).
// Returns "" or SQLite's error message.
std::string RawSql(const std::string& db_path, const std::string& sql);

}  // namespace dispatch::storage::testing
