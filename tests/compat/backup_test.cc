// Backup and restore for real (issue 49 point 8): `dispatchctl backup`
// against a real dispatcher while a client keeps writing, then kill -9, and
// a new dispatcher started on the backup resumes with everything committed
// before the backup and a consistent prefix of what came while it ran: the
// backup replays to the same state as the killed dispatcher's own journal
// up to the backup's last record. Refusals change nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "clients/pattern_bytes.h"
#include "state/codec.h"
#include "storage/store.h"
#include "tests/compat/fixture_support.h"
#include "tests/integration/client_loop.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_until.h"

namespace dispatch::testing {
namespace {

using namespace std::chrono_literals;

// Snapshots only at a clean stop: the killed dispatcher's journal then
// still holds every record after the snapshot the backup links.
std::vector<std::string> Flags() {
  return {"--snapshot-every=0", "--result-file-bytes=" + std::to_string(kFixtureResultFileBytes)};
}

kj::ArrayPtr<const kj::byte> Bytes(const std::string& s) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

struct Ran {
  int exit_code = -1;
  std::string out;
};

// dispatchctl with `args`, to its end; its stderr goes to `stderr_path`.
Ran Dispatchctl(std::vector<std::string> args, const std::string& stderr_path) {
  args.insert(args.begin(), DISPATCHCTL_BINARY);
  Subprocess ctl(std::move(args), stderr_path);
  Ran ran;
  while (auto line = ctl.ReadLine(120s)) ran.out += *line + "\n";
  auto status = ctl.Wait(120s);
  if (status && WIFEXITED(*status)) ran.exit_code = WEXITSTATUS(*status);
  return ran;
}

// The state of the work dir `dir` (a copy) replayed up to record `last` only.
Result<Replayed> ReplayWorkDirThrough(const std::string& dir, uint64_t last) {
  storage::StoreOptions options;
  options.work_dir = dir;
  options.synchronous = storage::Synchronous::kNormal;
  auto store = storage::Store::Open(options);
  if (!store.ok()) return store.status();
  auto snapshot = (*store)->LoadLatestSnapshot();
  if (!snapshot.ok()) return snapshot.status();
  state::DispatcherState state;
  if (snapshot->has_value()) {
    if ((*snapshot)->seq > last) return FailedPreconditionError("the snapshot is past the record");
    auto decoded = state::DecodeSnapshot((*snapshot)->bytes);
    if (!decoded.ok()) return decoded.status();
    state = std::move(decoded).value();
  }
  uint64_t reached = (*store)->snapshot_seq();
  Status replayed = (*store)->Replay(reached, [&](uint64_t seq, std::string_view bytes) -> Status {
    if (seq > last) return CancelledError("past the last record asked for");
    reached = seq;
    return state::ApplyEncodedUpdate(state, bytes);
  });
  if (!replayed.ok() && replayed.code() != StatusCode::kCancelled) return replayed;
  if (reached != last) return DataLossError("the journal ends at " + std::to_string(reached));
  return Replayed{state.Digest(), state.NumApplied()};
}

// A client that registers one dataset after another (16 KiB definitions,
// so the database grows by pages) until told to stop, and remembers the id
// of each acknowledged one, in order.
class Writer {
 public:
  static constexpr size_t kMaxWrites = 20000;

  explicit Writer(const std::string& address) : ids_(kMaxWrites) {
    thread_ = std::thread([this, address] {
      KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] { Run(address); })) {
        error_ = e->getDescription().cStr();
      }
    });
  }
  ~Writer() { Stop(); }

  size_t acked() const { return acked_.load(std::memory_order_acquire); }
  // REQUIRES: i < acked()
  uint64_t id(size_t i) const { return ids_[i]; }
  // Stops after the write in flight; the first error it met, if any.
  std::string Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return error_;
  }

 private:
  void Run(const std::string& address) {
    ClientLoop loop;
    auto conn = loop.Connect(address);
    const std::string padding(16 << 10, 'w');
    for (size_t i = 0; i < kMaxWrites && !stop_; ++i) {
      auto request = conn->dispatcher().getOrRegisterDatasetRequest();
      request.setDefinition(Bytes("writer " + std::to_string(i) + " " + padding));
      ids_[i] = loop.Wait(request.send()).getDatasetId();
      acked_.store(i + 1, std::memory_order_release);
    }
  }

  std::vector<uint64_t> ids_;
  std::atomic<size_t> acked_{0};
  std::atomic<bool> stop_{false};
  std::string error_;
  std::thread thread_;
};

uint64_t ParseLastRecord(const std::string& out) {
  const std::string key = "journal up to record ";
  const size_t at = out.find(key);
  return at == std::string::npos ? 0 : std::stoull(out.substr(at + key.size()));
}

TEST(Backup, TakenWhileAClientWritesItRestoresEverythingCommittedBeforeIt) {
  TempDir dir;
  const std::string work = dir.File("work");
  const std::string backup = dir.File("backup");
  {
    // The fixture's state (workers, closures with results, one in a file, a
    // DYNAMIC job), and a snapshot file: a clean stop writes one.
    DispatcherProcess first({.work_dir = work, .extra_flags = Flags()});
    Status traffic = DriveFixtureTraffic(first.address());
    ASSERT_TRUE(traffic.ok()) << traffic.ToString();
    auto stopped = first.Terminate();
    ASSERT_TRUE(stopped && WIFEXITED(*stopped) && WEXITSTATUS(*stopped) == 0);
  }
  DispatcherProcess live({.work_dir = work, .extra_flags = Flags()});
  Writer writer(live.address());
  // A database of a few MB first, so that the copy takes several steps.
  ASSERT_TRUE(WaitUntil([&] { return writer.acked() >= 300; }, 120s));
  const size_t before = writer.acked();
  Ran ran = Dispatchctl({"--dispatcher=" + live.address(), "--timeout-ms=120000", "backup",
                         "--to=" + backup},
                        dir.File("dispatchctl.log"));
  const size_t after = writer.acked();
  ASSERT_EQ(ran.exit_code, 0) << ReadWholeFile(dir.File("dispatchctl.log"));
  const uint64_t last = ParseLastRecord(ran.out);
  ASSERT_GT(last, 0u) << ran.out;
  // The writer goes on after the backup; then the dispatcher dies.
  ASSERT_TRUE(WaitUntil([&] { return writer.acked() >= after + 20; }, 120s));
  EXPECT_EQ(writer.Stop(), "");
  live.process().Signal(SIGKILL);
  ASSERT_TRUE(live.process().Wait(30s).has_value());

  EXPECT_TRUE(std::filesystem::exists(backup + "/results")) << "no result files";
  bool snapshot = false;
  for (const auto& entry : std::filesystem::directory_iterator(backup)) {
    snapshot |= entry.path().filename().string().rfind("snapshot-", 0) == 0;
  }
  EXPECT_TRUE(snapshot) << "the backup holds no snapshot file";
  Subprocess verify({DispatcherBinary(), "--verify", "--work-dir=" + backup});
  std::string said;
  while (auto line = verify.ReadLine(60s)) said += *line + "\n";
  auto verified = verify.Wait(60s);
  ASSERT_TRUE(verified.has_value());
  EXPECT_TRUE(WIFEXITED(*verified) && WEXITSTATUS(*verified) == 0) << said;

  // The backup is the killed dispatcher's state at record `last`, exactly.
  ASSERT_TRUE(CopyDir(backup, dir.File("backup-copy")).ok());
  ASSERT_TRUE(CopyDir(work, dir.File("work-copy")).ok());
  auto restored = ReplayWorkDir(dir.File("backup-copy"));
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  auto original = ReplayWorkDirThrough(dir.File("work-copy"), last);
  ASSERT_TRUE(original.ok()) << original.status().ToString();
  EXPECT_EQ(restored->applied, original->applied);
  EXPECT_EQ(restored->digest, original->digest)
      << "the backup replays to another state than the journal up to record " << last;

  // A dispatcher started on the backup resumes from it.
  DispatcherProcess resumed({.work_dir = backup, .extra_flags = Flags()});
  ClientLoop loop;
  auto conn = loop.Connect(resumed.address());
  std::set<uint64_t> datasets;
  auto listed = loop.Wait(conn->dispatcher().listDatasetsRequest().send());
  for (auto info : listed.getDatasets()) datasets.insert(info.getDatasetId());
  size_t present = 0;
  while (present < writer.acked() && datasets.count(writer.id(present)) == 1) ++present;
  EXPECT_GE(present, before) << "a write acknowledged before the backup is missing";
  EXPECT_LE(present, after + 1) << "the backup holds writes acknowledged after its reply";
  for (size_t i = present; i < writer.acked(); ++i) {
    EXPECT_EQ(datasets.count(writer.id(i)), 0u) << "write " << i << " is there, " << present
                                                << " is not: not a prefix";
  }
  // The fixture's closures: three results held, the large one from its file.
  const HeldFixtureResults held = FetchHeldFixtureResults(loop, conn->dispatcher());
  EXPECT_EQ(held.finished, 3u);
  EXPECT_TRUE(held.big.has_value()) << "the result kept in a file was not restored";
  if (held.big) {
    EXPECT_EQ(*held.big, clients::PatternBytes(kFixtureBigResultBytes, kFixtureBigResultSeed));
  }
}

TEST(Backup, RefusalsChangeNothing) {
  TempDir dir;
  DispatcherProcess live({.extra_flags = {"--token=secret"}});
  const std::string log = dir.File("dispatchctl.log");
  auto with_token = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--dispatcher=" + live.address(), "--token=secret"});
    return Dispatchctl(std::move(args), log);
  };

  // Without the right token the gateway hands out nothing.
  Ran ran = Dispatchctl({"--dispatcher=" + live.address(), "--token=wrong", "backup",
                         "--to=" + dir.File("a")},
                        log);
  EXPECT_EQ(ran.exit_code, 1);
  EXPECT_NE(ReadWholeFile(log).find("Unauthenticated"), std::string::npos) << ReadWholeFile(log);
  EXPECT_FALSE(std::filesystem::exists(dir.File("a")));

  // A target that is not empty.
  std::filesystem::create_directories(dir.File("full"));
  ASSERT_TRUE(WriteWholeFile(dir.File("full/notes"), "mine").ok());
  ran = with_token({"backup", "--to=" + dir.File("full")});
  EXPECT_EQ(ran.exit_code, 1);
  EXPECT_NE(ReadWholeFile(log).find("FailedPrecondition"), std::string::npos) << ReadWholeFile(log);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.File("full")),
                          std::filesystem::directory_iterator()),
            1);
  EXPECT_EQ(ReadWholeFile(dir.File("full/notes")), "mine");

  // The work dir itself.
  ran = with_token({"backup", "--to=" + live.work_dir()});
  EXPECT_EQ(ran.exit_code, 1);
  EXPECT_NE(ReadWholeFile(log).find("FailedPrecondition"), std::string::npos) << ReadWholeFile(log);

  // No --to: a usage error, nothing sent.
  ran = with_token({"backup"});
  EXPECT_EQ(ran.exit_code, 2);

  // The same dispatcher then backs up into an empty directory.
  std::filesystem::create_directories(dir.File("empty"));
  ran = with_token({"backup", "--to=" + dir.File("empty")});
  EXPECT_EQ(ran.exit_code, 0) << ReadWholeFile(log);
  EXPECT_TRUE(std::filesystem::exists(dir.File("empty/dispatch.db")));
}

}  // namespace
}  // namespace dispatch::testing
