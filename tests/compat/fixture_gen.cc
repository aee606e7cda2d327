// compat_fixture_gen: writes the fixtures of tests/compat/fixtures/ from the
// build it belongs to. Run it only to replace them on purpose (a format
// change that is meant to break old deployments; PROTOCOL.md, "Versions and
// compatibility"): every later build must replay what it wrote.
//   compat_fixture_gen work-dir OUT  OUT/work_dir/ and OUT/work_dir.digest
//   compat_fixture_gen etcd OUT      OUT/etcd_journal.dump and .digest
// work-dir: a real dispatcher (--snapshot-every=10, results of
// kFixtureResultFileBytes or more in files) serves the fixture's traffic and
// is killed with -9, so the work dir holds a snapshot, journal records after
// it, result rows and files and a dataset; the WAL is then checkpointed into
// dispatch.db (what the next start would do first) so no WAL is committed.
// etcd: the same traffic against a one-member HA group on a real etcd, then
// every journal and snapshot key of the group, dumped.
// Each digest is the state digest a replay of the fixture gives; the
// generator refuses a fixture that lacks one of the parts it must hold.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "storage/sqlite.h"
#include "tests/compat/fixture_support.h"
#include "tests/etcd/ha_group.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

using namespace std::chrono_literals;

const std::vector<std::string> kFixtureFlags = {
    "--snapshot-every=10", "--result-file-bytes=" + std::to_string(kFixtureResultFileBytes)};

int64_t Count(sqlite3* db, const std::string& sql) {
  auto n = storage::QueryInt(db, sql.c_str(), "counting");
  return n.ok() ? *n : -1;
}

Status WriteDigestOf(const std::string& fixture, const std::string& digest_path) {
  TempDir scratch;
  DISPATCH_RETURN_IF_ERROR(CopyDir(fixture, scratch.File("copy")));
  auto replayed = ReplayWorkDir(scratch.File("copy"));
  if (!replayed.ok()) return replayed.status();
  return WriteWholeFile(digest_path, FormatDigestFile(*replayed));
}

Status WorkDir(const std::string& out) {
  TempDir scratch;
  const std::string work = scratch.File("work");
  {
    DispatcherProcess::Options options;
    options.work_dir = work;
    options.extra_flags = kFixtureFlags;
    DispatcherProcess dispatcher(options);
    DISPATCH_RETURN_IF_ERROR(DriveFixtureTraffic(dispatcher.address()));
    dispatcher.process().Signal(SIGKILL);
    if (!dispatcher.process().Wait(30s)) return InternalError("the dispatcher did not die");
  }
  const std::string fixture = out + "/work_dir";
  std::filesystem::remove_all(fixture);
  DISPATCH_RETURN_IF_ERROR(CopyDir(work, fixture));
  for (const char* transient : {"dispatch.db-shm", "LOCK"}) {
    std::filesystem::remove(fixture + "/" + transient);
  }
  {
    auto db = storage::OpenSqlite(fixture + "/dispatch.db", SQLITE_OPEN_READWRITE, "the fixture");
    if (!db.ok()) return db.status();
    DISPATCH_RETURN_IF_ERROR(
        storage::ExecSql(db->get(), "PRAGMA wal_checkpoint(TRUNCATE)", "checkpointing"));
    const int64_t snapshot = Count(db->get(), "SELECT coalesce(max(seq), 0) FROM snapshot_file");
    const int64_t after =
        Count(db->get(), "SELECT count(*) FROM journal WHERE seq > " + std::to_string(snapshot));
    const int64_t results = Count(db->get(), "SELECT count(*) FROM result");
    const int64_t datasets = Count(db->get(), "SELECT count(*) FROM dataset");
    std::fprintf(stderr,
                 "work dir: snapshot at %lld, %lld records after it, %lld result rows, "
                 "%lld datasets\n",
                 static_cast<long long>(snapshot), static_cast<long long>(after),
                 static_cast<long long>(results), static_cast<long long>(datasets));
    if (snapshot <= 0 || after <= 0 || results <= 0 || datasets <= 0) {
      return InternalError("the work dir lacks a part it must hold (see the line above)");
    }
  }
  if (std::filesystem::exists(fixture + "/dispatch.db-wal")) {
    return InternalError("the WAL is still there after the checkpoint");
  }
  size_t result_files = 0;
  if (std::filesystem::exists(fixture + "/results")) {
    for (auto& entry : std::filesystem::recursive_directory_iterator(fixture + "/results")) {
      result_files += entry.is_regular_file() ? 1 : 0;
    }
  }
  if (result_files == 0) return InternalError("the work dir holds no result file");
  return WriteDigestOf(fixture, out + "/work_dir.digest");
}

Status Etcd(const std::string& out) {
  if (!EtcdCluster::Available()) return UnavailableError("etcd is not installed");
  EtcdCluster etcd;
  if (!etcd.Start()) return UnavailableError("etcd did not start: " + etcd.error());
  std::vector<std::pair<std::string, std::string>> kvs;
  {
    std::vector<std::string> flags = kFixtureFlags;
    HaGroup group(etcd, 1, "2000", flags);
    group.Start(0);
    if (group.WaitLeader() != 0) return InternalError("no leader: " + group.LogTails());
    DISPATCH_RETURN_IF_ERROR(DriveFixtureTraffic(group.address(0)));
    group.Kill9(0);
  }
  // HaGroup's prefix.
  auto read = ReadEtcdKeys(etcd.endpoints(), kFixturePrefix);
  if (!read.ok()) return read.status();
  kvs = std::move(read).value();
  size_t journal = 0, snapshot = 0;
  for (const auto& [key, value] : kvs) {
    journal += key.find("/journal/") != std::string::npos ? 1 : 0;
    snapshot += key.find("/snapshot/current") != std::string::npos ? 1 : 0;
  }
  std::fprintf(stderr, "etcd: %zu keys, %zu journal keys, %zu snapshot descriptors\n", kvs.size(),
               journal, snapshot);
  if (journal == 0 || snapshot == 0)
    return InternalError("the dump lacks journal or snapshot keys");
  const std::string dump = out + "/etcd_journal.dump";
  DISPATCH_RETURN_IF_ERROR(WriteWholeFile(dump, FormatDump(kvs)));
  // Replayed from the file, in an etcd of its own, as the test does.
  EtcdCluster fresh;
  if (!fresh.Start()) return UnavailableError("etcd did not start: " + fresh.error());
  auto parsed = ParseDump(ReadWholeFile(dump));
  if (!parsed.ok()) return parsed.status();
  TempDir scratch;
  auto replayed = ReplayEtcdDump(fresh.endpoints(), *parsed, scratch.File("store"));
  if (!replayed.ok()) return replayed.status();
  return WriteWholeFile(out + "/etcd_journal.digest", FormatDigestFile(*replayed));
}

}  // namespace
}  // namespace dispatch::testing

int main(int argc, char** argv) {
  using namespace dispatch;
  const std::string mode = argc == 3 ? argv[1] : "";
  if (mode != "work-dir" && mode != "etcd") {
    std::fprintf(stderr, "usage: compat_fixture_gen work-dir|etcd OUT_DIR\n");
    return 2;
  }
  std::filesystem::create_directories(argv[2]);
  Status status = mode == "work-dir" ? testing::WorkDir(argv[2]) : testing::Etcd(argv[2]);
  if (!status.ok()) {
    std::fprintf(stderr, "compat_fixture_gen: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
