// `dispatch-bench journal`: what the SQLite journal costs. Measures, in one
// run, records/s for one transaction per record and group commits of 16 and
// 256, under synchronous FULL and NORMAL, against the floor: raw SQLite
// inserts of the same bytes in the same batch sizes into a plain table with
// the same pragmas. Then replay speed and start-up time (open + load snapshot
// + replay) after N records, with and without a snapshot. Reports; asserts nothing.
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench/latency.h"
#include "bench/registry.h"
#include "common/checksum.h"
#include "common/flag_parser.h"
#include "storage/store.h"

namespace dispatch::bench {
namespace {

using Clock = std::chrono::steady_clock;
using storage::Store;
using storage::StoreOptions;
using storage::Synchronous;

struct JournalFlags {
  std::string dir;  // parent of the scratch work dirs; $TMPDIR or /tmp by default
  uint64_t record_bytes = 100;
  uint64_t records = 200000;  // records per write measurement, at most
  double seconds = 1.0;       // ... and stop after this long
  uint64_t runs = 3;          // each figure is the median of this many runs
  uint64_t startup_records = 1000000;
  uint64_t snapshot_bytes = 8u << 20;
  uint64_t tail = 10000;  // records after the snapshot in the start-up case
  bool skip_startup = false;
  bool skip_writes = false;
  uint64_t stall_commits = 4000;  // commits per checkpoint-stall measurement; 0 skips it
};

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "dispatch-bench journal: %s\n", what.c_str());
  std::exit(1);
}

void Check(const Status& status, const char* what) {
  if (!status.ok()) Die(std::string(what) + ": " + status.ToString());
}

// A scratch work dir, removed afterwards.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& parent) {
    std::string pattern = parent + "/dispatch-journal-bench-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) Die("mkdtemp in " + parent + " failed");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Flushes the previous measurement's dirty pages so they are not written back
// during the next one.
void SyncAll() { ::sync(); }

std::string Record(uint64_t i, size_t bytes) {
  std::string out(bytes, '\0');
  for (size_t j = 0; j < bytes; ++j) out[j] = static_cast<char>((i * 131 + j * 7) & 0xFF);
  return out;
}

std::unique_ptr<Store> OpenStore(const std::string& dir, Synchronous sync) {
  StoreOptions options;
  options.work_dir = dir;
  options.synchronous = sync;
  auto store = Store::Open(options);
  Check(store.status(), "opening the store");
  return std::move(store).value();
}

// Records/s of Store::Commit with `batch_size` records per transaction.
double MeasureStore(const std::string& parent, Synchronous sync, uint64_t batch_size,
                    const JournalFlags& flags) {
  ScratchDir dir(parent);
  auto store = OpenStore(dir.path(), sync);
  JournalBatch batch;
  for (uint64_t i = 0; i < batch_size; ++i) batch.AddRecord(Record(i, flags.record_bytes));
  SyncAll();
  uint64_t done = 0;
  const auto start = Clock::now();
  while (done < flags.records && SecondsSince(start) < flags.seconds) {
    Check(store->Commit(batch).status(), "commit");
    done += batch_size;
  }
  return static_cast<double>(done) / SecondsSince(start);
}

void Exec(sqlite3* db, const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    Die(std::string("floor: ") + sql + ": " + (error ? error : "?"));
  }
}

// The floor: the same bytes, the same batch sizes, the same pragmas, a plain
// (seq, body) table, prepared statements, no checksums, no Store.
double MeasureFloor(const std::string& parent, Synchronous sync, uint64_t batch_size,
                    const JournalFlags& flags) {
  ScratchDir dir(parent);
  sqlite3* db = nullptr;
  const std::string path = dir.path() + "/floor.db";
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    Die("floor: cannot open " + path);
  }
  Exec(db, "PRAGMA journal_mode=WAL");
  Exec(db, sync == Synchronous::kFull ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
  sqlite3_wal_autocheckpoint(db, 0);
  Exec(db, "CREATE TABLE raw (seq INTEGER PRIMARY KEY, body BLOB NOT NULL)");
  sqlite3_stmt* begin = nullptr;
  sqlite3_stmt* insert = nullptr;
  sqlite3_stmt* commit = nullptr;
  sqlite3_prepare_v2(db, "BEGIN IMMEDIATE", -1, &begin, nullptr);
  sqlite3_prepare_v2(db, "INSERT INTO raw (seq, body) VALUES (?1, ?2)", -1, &insert, nullptr);
  sqlite3_prepare_v2(db, "COMMIT", -1, &commit, nullptr);
  std::vector<std::string> records;
  for (uint64_t i = 0; i < batch_size; ++i) records.push_back(Record(i, flags.record_bytes));
  uint64_t seq = 0;
  SyncAll();
  uint64_t done = 0;
  const auto start = Clock::now();
  for (; done < flags.records && SecondsSince(start) < flags.seconds; done += batch_size) {
    if (sqlite3_step(begin) != SQLITE_DONE) Die("floor: BEGIN failed");
    sqlite3_reset(begin);
    for (const std::string& record : records) {
      sqlite3_bind_int64(insert, 1, static_cast<sqlite3_int64>(++seq));
      sqlite3_bind_blob(insert, 2, record.data(), static_cast<int>(record.size()), SQLITE_STATIC);
      if (sqlite3_step(insert) != SQLITE_DONE) Die("floor: INSERT failed");
      sqlite3_reset(insert);
    }
    if (sqlite3_step(commit) != SQLITE_DONE) Die("floor: COMMIT failed");
    sqlite3_reset(commit);
  }
  const double rate = static_cast<double>(done) / SecondsSince(start);
  sqlite3_finalize(begin);
  sqlite3_finalize(insert);
  sqlite3_finalize(commit);
  sqlite3_close(db);
  return rate;
}

void RunWriteTable(const JournalFlags& flags) {
  std::printf("%-7s %6s %14s %14s %12s\n", "sync", "batch", "store rec/s", "floor rec/s",
              "store/floor");
  for (Synchronous sync : {Synchronous::kFull, Synchronous::kNormal}) {
    for (uint64_t batch : {uint64_t{1}, uint64_t{16}, uint64_t{256}}) {
      std::vector<double> store_rates;
      std::vector<double> floor_rates;
      // Interleaved, in alternating order, so drift in the machine and the
      // writeback of the previous run hit both alike.
      for (uint64_t run = 0; run < flags.runs; ++run) {
        if (run % 2 == 0) floor_rates.push_back(MeasureFloor(flags.dir, sync, batch, flags));
        store_rates.push_back(MeasureStore(flags.dir, sync, batch, flags));
        if (run % 2 == 1) floor_rates.push_back(MeasureFloor(flags.dir, sync, batch, flags));
      }
      const double store_rate = Median(store_rates);
      const double floor_rate = Median(floor_rates);
      std::printf("%-7s %6llu %14.0f %14.0f %11.0f%%\n",
                  sync == Synchronous::kFull ? "FULL" : "NORMAL",
                  static_cast<unsigned long long>(batch), store_rate, floor_rate,
                  100.0 * store_rate / floor_rate);
      std::fflush(stdout);
    }
  }
}

struct StartUpTimes {
  double open_s = 0;
  double snapshot_s = 0;
  double replay_s = 0;
  uint64_t replayed = 0;
  double total() const { return open_s + snapshot_s + replay_s; }
};

// What the dispatcher does at start: open, load the latest snapshot, replay
// the journal after it (the callback only touches the bytes, as a stand-in
// for decoding and applying).
StartUpTimes StartUp(const std::string& dir) {
  StartUpTimes times;
  auto start = Clock::now();
  auto store = OpenStore(dir, Synchronous::kFull);
  times.open_s = SecondsSince(start);
  start = Clock::now();
  auto snapshot = store->LoadLatestSnapshot();
  Check(snapshot.status(), "loading the snapshot");
  times.snapshot_s = SecondsSince(start);
  const uint64_t base = snapshot->has_value() ? (*snapshot)->seq : 0;
  uint64_t touched = 0;
  start = Clock::now();
  Check(store->Replay(base,
                      [&](uint64_t, std::string_view bytes) {
                        touched += bytes.size() + static_cast<unsigned char>(bytes[0]);
                        ++times.replayed;
                        return Status::Ok();
                      }),
        "replay");
  times.replay_s = SecondsSince(start);
  if (touched == 0) std::printf(" ");  // keeps the callback's work observable
  return times;
}

StartUpTimes MedianStartUp(const std::string& dir, uint64_t runs) {
  std::vector<StartUpTimes> all;
  for (uint64_t i = 0; i < runs; ++i) all.push_back(StartUp(dir));
  std::sort(all.begin(), all.end(),
            [](const StartUpTimes& a, const StartUpTimes& b) { return a.total() < b.total(); });
  return all[all.size() / 2];
}

void PrintStartUp(const char* label, const StartUpTimes& t) {
  std::printf("%-44s %9.1f %9.1f %9.1f %9.1f %12.0f\n", label, t.open_s * 1e3, t.snapshot_s * 1e3,
              t.replay_s * 1e3, t.total() * 1e3,
              t.replay_s > 0 ? static_cast<double>(t.replayed) / t.replay_s : 0.0);
}

void RunStartUp(const JournalFlags& flags) {
  ScratchDir dir(flags.dir);
  {
    // Built with NORMAL and big batches: only the result matters here.
    auto store = OpenStore(dir.path(), Synchronous::kNormal);
    auto checkpointer = store->NewCheckpointer();
    Check(checkpointer.status(), "checkpointer");
    JournalBatch batch;
    const auto start = Clock::now();
    for (uint64_t next = 1; next <= flags.startup_records; next += 256) {
      batch.Clear();
      const uint64_t n = std::min<uint64_t>(256, flags.startup_records - next + 1);
      for (uint64_t i = 0; i < n; ++i) batch.AddRecord(Record(next + i, flags.record_bytes));
      Check(store->Commit(batch).status(), "commit");
      if (store->WantsCheckpoint()) Check((*checkpointer)->Checkpoint().status(), "checkpoint");
    }
    std::printf("\nbuilt a journal of %llu records in %.1f s\n",
                static_cast<unsigned long long>(flags.startup_records), SecondsSince(start));
  }
  std::printf("%-44s %9s %9s %9s %9s %12s\n", "start-up (warm page cache)", "open ms", "snap ms",
              "replay ms", "total ms", "replay rec/s");
  const std::string no_snapshot =
      "after " + std::to_string(flags.startup_records) + " records, no snapshot";
  PrintStartUp(no_snapshot.c_str(), MedianStartUp(dir.path(), flags.runs));
  std::fflush(stdout);

  double snapshot_write_s = 0;
  {
    auto store = OpenStore(dir.path(), Synchronous::kFull);
    const std::string snapshot(flags.snapshot_bytes, 's');
    const auto start = Clock::now();
    Check(store->WriteSnapshot(store->last_seq(), snapshot), "snapshot");
    snapshot_write_s = SecondsSince(start);
    JournalBatch batch;
    for (uint64_t done = 0; done < flags.tail; done += 256) {
      batch.Clear();
      for (uint64_t i = 0; i < 256 && done + i < flags.tail; ++i) {
        batch.AddRecord(Record(done + i, flags.record_bytes));
      }
      Check(store->Commit(batch).status(), "tail commit");
    }
  }
  const std::string with_snapshot = "same + " + std::to_string(flags.snapshot_bytes >> 20) +
                                    " MiB snapshot + " + std::to_string(flags.tail) + " tail";
  PrintStartUp(with_snapshot.c_str(), MedianStartUp(dir.path(), flags.runs));
  std::printf("writing that snapshot (and deleting %llu journal records): %.1f ms\n",
              static_cast<unsigned long long>(flags.startup_records), snapshot_write_s * 1e3);
}

// Commit latency on the "loop thread" while the WAL is checkpointed: by the
// Checkpointer on another thread (our design) versus SQLite's default inline
// auto-checkpoint every 1000 frames on the committing connection.
struct StallFigures {
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  int checkpoints = 0;
  int most_wal_frames = 0;
  double finish_max_ms = 0;  // longest FinishCheckpoint (inside the latencies)
};

StallFigures Summarize(std::vector<double> ms, int checkpoints) {
  std::sort(ms.begin(), ms.end());
  StallFigures f;
  f.p50_ms = ms[ms.size() / 2];
  f.p99_ms = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  f.max_ms = ms.back();
  f.checkpoints = checkpoints;
  return f;
}

StallFigures MeasureOffLoopCheckpoints(const JournalFlags& flags, Synchronous sync) {
  ScratchDir dir(flags.dir);
  StoreOptions options;
  options.work_dir = dir.path();
  options.checkpoint_wal_frames = 1000;
  options.wal_restart_frames = 4000;
  options.synchronous = sync;
  auto opened = Store::Open(options);
  Check(opened.status(), "opening the store");
  Store& store = **opened;
  auto checkpointer = store.NewCheckpointer();
  Check(checkpointer.status(), "checkpointer");
  JournalBatch batch;
  for (int i = 0; i < 16; ++i) batch.AddRecord(Record(i, flags.record_bytes));
  std::atomic<bool> running{false};
  Result<storage::CheckpointStats> result = storage::CheckpointStats();
  int started = 0;
  int most_frames = 0;
  double finish_max_ms = 0;
  std::thread worker;
  std::vector<double> ms;
  for (uint64_t i = 0; i < flags.stall_commits; ++i) {
    const auto start = Clock::now();
    Check(store.Commit(batch).status(), "commit");
    // What the reactor does with uv_queue_work: one checkpoint at a time, its
    // result handed to FinishCheckpoint on the loop thread (timed: it may copy
    // a small remainder inline).
    if (worker.joinable() && !running.load(std::memory_order_acquire)) {
      worker.join();
      Check(result.status(), "checkpoint");
      const auto finish_start = Clock::now();
      Check(store.FinishCheckpoint(*result).status(), "finishing a checkpoint");
      finish_max_ms = std::max(finish_max_ms, SecondsSince(finish_start) * 1e3);
    }
    if (!worker.joinable() && store.WantsCheckpoint()) {
      running.store(true, std::memory_order_relaxed);
      ++started;
      worker = std::thread([&] {
        result = (*checkpointer)->Checkpoint();
        running.store(false, std::memory_order_release);
      });
    }
    ms.push_back(SecondsSince(start) * 1e3);
    most_frames = std::max(most_frames, store.wal_frames());
  }
  if (worker.joinable()) worker.join();
  StallFigures figures = Summarize(std::move(ms), started);
  figures.most_wal_frames = most_frames;
  figures.finish_max_ms = finish_max_ms;
  return figures;
}

StallFigures MeasureInlineCheckpoints(const JournalFlags& flags, Synchronous sync) {
  ScratchDir dir(flags.dir);
  sqlite3* db = nullptr;
  const std::string path = dir.path() + "/inline.db";
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) Die("cannot open " + path);
  Exec(db, "PRAGMA journal_mode=WAL");
  Exec(db, sync == Synchronous::kFull ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
  Exec(db, "CREATE TABLE raw (seq INTEGER PRIMARY KEY, body BLOB NOT NULL)");
  // SQLite's default: checkpoint inline once the WAL reaches 1000 frames;
  // counted through a hook that does what the default hook does.
  struct Counts {
    int checkpoints = 0;
    int most_frames = 0;
  } counts;
  sqlite3_wal_hook(
      db,
      [](void* arg, sqlite3* conn, const char* name, int frames) {
        Counts* c = static_cast<Counts*>(arg);
        c->most_frames = std::max(c->most_frames, frames);
        if (frames >= 1000) {
          ++c->checkpoints;
          sqlite3_wal_checkpoint(conn, name);
        }
        return SQLITE_OK;
      },
      &counts);
  sqlite3_stmt* insert = nullptr;
  sqlite3_prepare_v2(db, "INSERT INTO raw (seq, body) VALUES (?1, ?2)", -1, &insert, nullptr);
  const std::string record = Record(0, flags.record_bytes);
  std::vector<double> ms;
  uint64_t seq = 0;
  for (uint64_t i = 0; i < flags.stall_commits; ++i) {
    const auto start = Clock::now();
    Exec(db, "BEGIN IMMEDIATE");
    for (int r = 0; r < 16; ++r) {
      sqlite3_bind_int64(insert, 1, static_cast<sqlite3_int64>(++seq));
      sqlite3_bind_blob(insert, 2, record.data(), static_cast<int>(record.size()), SQLITE_STATIC);
      if (sqlite3_step(insert) != SQLITE_DONE) Die("inline: INSERT failed");
      sqlite3_reset(insert);
    }
    Exec(db, "COMMIT");
    ms.push_back(SecondsSince(start) * 1e3);
  }
  sqlite3_finalize(insert);
  sqlite3_close(db);
  StallFigures figures = Summarize(std::move(ms), counts.checkpoints);
  figures.most_wal_frames = counts.most_frames;
  return figures;
}

void RunStallTable(const JournalFlags& flags) {
  std::printf(
      "\ncommit latency while the WAL is checkpointed (16 records per commit, %llu commits, "
      "checkpoint every 1000 frames, off-loop: WAL restart at 4000)\n",
      static_cast<unsigned long long>(flags.stall_commits));
  std::printf("%-7s %-42s %8s %8s %8s %6s %9s %10s\n", "sync", "checkpoints run", "p50 ms",
              "p99 ms", "max ms", "ckpts", "WAL peak", "finish ms");
  for (Synchronous sync : {Synchronous::kFull, Synchronous::kNormal}) {
    const char* name = sync == Synchronous::kFull ? "FULL" : "NORMAL";
    const StallFigures off = MeasureOffLoopCheckpoints(flags, sync);
    std::printf("%-7s %-42s %8.2f %8.2f %8.2f %6d %9d %10.2f\n", name,
                "off-loop (Checkpointer + FinishCheckpoint)", off.p50_ms, off.p99_ms, off.max_ms,
                off.checkpoints, off.most_wal_frames, off.finish_max_ms);
    const StallFigures in = MeasureInlineCheckpoints(flags, sync);
    std::printf("%-7s %-42s %8.2f %8.2f %8.2f %6d %9d\n", name,
                "inline (SQLite's default auto-checkpoint)", in.p50_ms, in.p99_ms, in.max_ms,
                in.checkpoints, in.most_wal_frames);
    std::fflush(stdout);
  }
}

int RunJournalBench(int argc, char** argv) {
  JournalFlags flags;
  const char* tmp = getenv("TMPDIR");
  flags.dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  FlagParser parser("dispatch-bench journal",
                    "SQLite journal: group commit vs raw SQLite, replay, start-up.");
  parser.AddString("dir", "PATH", "parent of the scratch work dirs", &flags.dir);
  parser.AddUint("record_bytes", "bytes per record", &flags.record_bytes, 1, 1u << 24);
  parser.AddUint("records", "records per write measurement, at most", &flags.records, 1);
  parser.AddCustom(
      "seconds", "S", "time per write measurement, at most", "1.0",
      [&flags](const std::string& value) {
        char* end = nullptr;
        flags.seconds = std::strtod(value.c_str(), &end);
        if (end == value.c_str() || *end != '\0' || !(flags.seconds > 0)) {
          return InvalidArgumentError("--seconds wants a positive number, got '" + value + "'");
        }
        return Status::Ok();
      });
  parser.AddUint("runs", "runs per figure (median)", &flags.runs, 1, 100);
  parser.AddUint("startup_records", "journal length for the start-up case", &flags.startup_records,
                 1);
  parser.AddUint("snapshot_bytes", "snapshot size for the start-up case", &flags.snapshot_bytes, 1,
                 512u << 20);
  parser.AddUint("tail", "records after the snapshot in the start-up case", &flags.tail);
  parser.AddBool("skip_startup", "no start-up measurement", &flags.skip_startup);
  parser.AddBool("skip_writes", "no records/s table", &flags.skip_writes);
  parser.AddUint("stall_commits", "commits per checkpoint-stall measurement (0: skip it)",
                 &flags.stall_commits);
  ParseFlagsOrExit(parser, argc, argv);

  std::printf(
      "journal bench: %llu-byte records, median of %llu runs, scratch dirs in %s, "
      "SQLite %s, CRC32C %s\n\n",
      static_cast<unsigned long long>(flags.record_bytes),
      static_cast<unsigned long long>(flags.runs), flags.dir.c_str(), sqlite3_libversion(),
      Crc32cIsHardwareAccelerated() ? "sse4.2" : "table");
  if (!flags.skip_writes) RunWriteTable(flags);
  if (flags.stall_commits > 0) RunStallTable(flags);
  if (!flags.skip_startup) RunStartUp(flags);
  return 0;
}

}  // namespace

DISPATCH_BENCH("journal", "SQLite journal: group commit vs raw SQLite, replay, start-up",
               RunJournalBench);

}  // namespace dispatch::bench
