// storage_test_helper: the second process of the storage tests. It does one
// thing per mode and reports on stdout (a pipe) one line per event, written
// with write(2) right after the event, so the parent knows exactly what was
// acknowledged when it kills us:
//   append <dir> <seed> <full|normal>  commit batches forever: "C <first> <last>"
//                                      per commit, "S <seq>" per snapshot
//   open <dir>                         try Store::Open: "OK" or "ERR <code> <message>"
//   hold <dir>                         open, print "READY <pid>", wait to be killed
//   fill <dir> <extra_bytes>           commit under RLIMIT_FSIZE until a commit fails:
//                                      "C <first> <last>"..., "F <code>", "R <same>"
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "storage/store.h"
#include "tests/storage/test_util.h"
#include "tests/support/child_report.h"

namespace dispatch::storage::testing {
namespace {

using dispatch::testing::Die;
using dispatch::testing::Report;

std::unique_ptr<Store> OpenOrDie(const std::string& dir, Synchronous sync, int wal_frames) {
  StoreOptions options;
  options.work_dir = dir;
  options.synchronous = sync;
  options.checkpoint_wal_frames = wal_frames;
  auto store = Store::Open(options);
  if (!store.ok()) Die(store.status());
  return std::move(store).value();
}

// Appends random batches forever; a checkpoint thread runs whenever the
// Store asks for one, so kills also land during checkpoints.
int Append(const std::string& dir, uint64_t seed, Synchronous sync) {
  std::unique_ptr<Store> store = OpenOrDie(dir, sync, 64);
  auto checkpointer = store->NewCheckpointer();
  if (!checkpointer.ok()) Die(checkpointer.status());
  std::mt19937_64 rng(seed);
  ThreadedCheckpoints checkpoints(*store, **checkpointer);
  JournalBatch batch;
  while (true) {
    batch.Clear();
    const uint64_t first = store->last_seq() + 1;
    const int count = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < count; ++i) batch.AddRecord(RecordPayload(first + i));
    // Batches whose first record is a multiple of 5 carry a dataset definition.
    if (first % 5 == 0) {
      const std::string key = "ds-" + std::to_string(first);
      batch.PutDataset(key, DatasetPayload(key));
    }
    auto last = store->Commit(batch);
    if (!last.ok()) Die(last.status());
    Report("C " + std::to_string(first) + " " + std::to_string(*last));
    if (rng() % 40 == 0) {
      Status status = store->WriteSnapshot(*last, SnapshotPayload(*last));
      if (!status.ok()) Die(status);
      Report("S " + std::to_string(*last));
    }
    Status checkpoint = checkpoints.Poll();
    if (!checkpoint.ok()) Die(checkpoint);
  }
}

int TryOpen(const std::string& dir) {
  StoreOptions options;
  options.work_dir = dir;
  auto store = Store::Open(options);
  if (store.ok()) {
    Report("OK");
    return 0;
  }
  Report(std::string("ERR ") + StatusCodeName(store.status().code()) + " " +
         store.status().message());
  return 1;
}

int Hold(const std::string& dir) {
  std::unique_ptr<Store> store = OpenOrDie(dir, Synchronous::kFull, 2048);
  Report("READY " + std::to_string(getpid()));
  while (true) pause();  // until the parent kills us
}

off_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

// A full disk, simulated by RLIMIT_FSIZE: once a file would grow past the
// limit, write() fails with EFBIG (SIGXFSZ is ignored), as on ENOSPC.
int Fill(const std::string& dir, long extra_bytes) {
  std::unique_ptr<Store> store = OpenOrDie(dir, Synchronous::kFull, 1 << 30);
  signal(SIGXFSZ, SIG_IGN);
  const off_t biggest =
      std::max({FileSize(dir + "/dispatch.db"), FileSize(dir + "/dispatch.db-wal"), off_t{32768}});
  rlimit limit{static_cast<rlim_t>(biggest + extra_bytes),
               static_cast<rlim_t>(biggest + extra_bytes)};
  if (setrlimit(RLIMIT_FSIZE, &limit) != 0) Die(InternalError("setrlimit failed"));
  JournalBatch batch;
  Status failure;
  for (int round = 0; round < 100000; ++round) {
    batch.Clear();
    const uint64_t first = store->last_seq() + 1;
    for (int i = 0; i < 10; ++i) batch.AddRecord(RecordPayload(first + i));
    auto last = store->Commit(batch);
    if (!last.ok()) {
      failure = last.status();
      break;
    }
    Report("C " + std::to_string(first) + " " + std::to_string(*last));
  }
  if (failure.ok()) Die(InternalError("the disk never filled up"));
  Report(std::string("F ") + StatusCodeName(failure.code()) + " " + failure.message());
  // Fail-stop: a retry, even one that would fit, and a snapshot are refused
  // with the original error.
  batch.Clear();
  batch.AddRecord("x");
  auto retry = store->Commit(batch);
  const Status snapshot = store->WriteSnapshot(store->last_seq(), "s");
  const bool same = !retry.ok() && retry.status() == failure && snapshot == failure;
  Report(std::string("R ") +
         (same ? "same" : "different: " + retry.status().ToString() + " / " + snapshot.ToString()));
  return 0;
}

}  // namespace
}  // namespace dispatch::storage::testing

int main(int argc, char** argv) {
  using namespace dispatch::storage::testing;
  using dispatch::storage::Synchronous;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "append" && argc == 5) {
    return Append(argv[2], std::strtoull(argv[3], nullptr, 10),
                  std::strcmp(argv[4], "normal") == 0 ? Synchronous::kNormal : Synchronous::kFull);
  }
  if (mode == "open" && argc == 3) return TryOpen(argv[2]);
  if (mode == "hold" && argc == 3) return Hold(argv[2]);
  if (mode == "fill" && argc == 4) return Fill(argv[2], std::strtol(argv[3], nullptr, 10));
  std::fprintf(stderr, "usage: storage_test_helper append|open|hold|fill ...\n");
  return 2;
}
