// Damage that SQLite cannot see (issue 18, section 1), on the real dispatcher
// binary and its real SQLite file: after acknowledged changes the journal's
// last row is deleted, the WAL is cut mid-frame or deleted after a partial
// checkpoint, or a dataset row is flipped. The next start must be refused
// (exit 1) with an error naming what is missing or damaged, or lose nothing.
// And `dispatcher --verify` reports a clean and a damaged work dir.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "tests/dataservice/ds_test_util.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

using namespace std::chrono_literals;

struct Acked {
  std::vector<uint64_t> datasets;
  std::vector<uint64_t> jobs;
  std::vector<uint64_t> job_clients;
};

// `rounds` times: a dataset, a job on it and its job client, each
// acknowledged before the next call.
void AckChanges(DsClient& client, int rounds, const std::string& tag, Acked& acked) {
  for (int i = 0; i < rounds; ++i) {
    auto dataset = client.RegisterDataset({.definition = tag + "-" + std::to_string(i)});
    ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
    auto job = client.GetOrCreateJob({.dataset_id = *dataset});
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    acked.datasets.push_back(*dataset);
    acked.jobs.push_back(job->job_id);
    acked.job_clients.push_back(job->job_client_id);
  }
}

void KillNine(std::unique_ptr<DispatcherProcess>& dispatcher) {
  dispatcher->process().Signal(SIGKILL);
  ASSERT_TRUE(dispatcher->process().Wait(30s).has_value());
  dispatcher.reset();
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Where the WAL's frames end: the dispatcher extends its WAL with zeros, and
// SQLite reuses it from the start after a checkpoint, so the file's size says
// nothing. A frame of the current log carries the header's two salts (bytes
// 16..23 of the 32-byte header, 8..15 of the frame's 24-byte header).
uint64_t WalFramesEnd(const std::string& wal_path, uint64_t page_size) {
  const std::string wal = ReadText(wal_path);
  if (wal.size() < 32) return 0;
  const std::string salts = wal.substr(16, 8);
  uint64_t end = 32;
  while (end + 24 + page_size <= wal.size() && wal.compare(end + 8, 8, salts) == 0) {
    end += 24 + page_size;
  }
  return end;
}

// One column of one row through a raw SQLite connection ("" when none).
std::string QueryOne(const std::string& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      const char* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
      out = text != nullptr ? text : "";
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return out;
}

// Flips one byte of the first dataset definition, its checksum left as it was.
void FlipFirstDatasetByte(const std::string& db_path) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT rowid, body FROM dataset ORDER BY key LIMIT 1", -1, &stmt,
                               nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  const int64_t rowid = sqlite3_column_int64(stmt, 0);
  std::string body(static_cast<const char*>(sqlite3_column_blob(stmt, 1)),
                   sqlite3_column_bytes(stmt, 1));
  sqlite3_finalize(stmt);
  ASSERT_FALSE(body.empty());
  body[body.size() / 2] ^= 0x20;
  ASSERT_EQ(sqlite3_prepare_v2(db, "UPDATE dataset SET body = ?1 WHERE rowid = ?2", -1, &stmt, nullptr),
            SQLITE_OK);
  sqlite3_bind_blob(stmt, 1, body.data(), static_cast<int>(body.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(stmt, 2, rowid);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_DONE);
  sqlite3_finalize(stmt);
  ASSERT_EQ(sqlite3_close(db), SQLITE_OK);
}

// The refusal a damaged work dir must get: exit 1, the log naming `needle`.
// A dispatcher that starts instead must have every acknowledged change.
void ExpectRefusedOrLossless(const std::string& work_dir, const std::string& log_path,
                             const Acked& acked, const std::string& needle,
                             bool require_refusal) {
  static const std::string kPrefix = "dispatcher listening on ";
  Subprocess dispatcher({DispatcherBinary(), "--listen=tcp:127.0.0.1:0", "--work-dir=" + work_dir,
                         "--http=off", "--log-level=warning"},
                        log_path);
  auto line = dispatcher.ReadLine(60s);
  if (!line || line->rfind(kPrefix, 0) != 0) {
    auto status = dispatcher.Wait(60s);
    ASSERT_TRUE(status.has_value()) << "the dispatcher neither started nor exited";
    const std::string log = ReadText(log_path);
    ASSERT_TRUE(WIFEXITED(*status)) << "status " << *status << "; log:\n" << log;
    EXPECT_EQ(WEXITSTATUS(*status), 1) << log;
    EXPECT_NE(log.find(needle), std::string::npos) << "'" << needle << "' not in the log:\n" << log;
    std::printf("[ info     ] refused: %s\n", log.substr(0, 700).c_str());
    return;
  }
  const std::string address = line->substr(kPrefix.size());
  const std::string log = ReadText(log_path);
  ClientLoop loop;
  DsClient client(loop, address);
  auto clients = client.ListJobClients();
  auto jobs = client.ListJobs();
  auto datasets = client.ListDatasets();
  ASSERT_TRUE(clients.ok() && jobs.ok() && datasets.ok());
  size_t lost_clients = 0, lost_jobs = 0, lost_datasets = 0, unreadable = 0;
  for (uint64_t id : acked.job_clients) {
    lost_clients += std::find(clients->begin(), clients->end(), id) == clients->end();
  }
  for (uint64_t id : acked.jobs) {
    bool found = false;
    for (const JobView& job : *jobs) found = found || job.job_id == id;
    lost_jobs += !found;
  }
  for (uint64_t id : acked.datasets) {
    lost_datasets += std::find(datasets->begin(), datasets->end(), id) == datasets->end();
    unreadable += !client.GetDatasetDef(id).ok();
  }
  EXPECT_FALSE(require_refusal) << "the dispatcher started on a damaged work dir; log:\n"
                                << log;
  EXPECT_EQ(lost_clients + lost_jobs + lost_datasets + unreadable, 0u)
      << "started and lost acknowledged changes: " << lost_datasets << " datasets, " << lost_jobs
      << " jobs, " << lost_clients << " job clients; " << unreadable
      << " datasets unreadable; log:\n"
      << log;
}

class JournalDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    work_dir_ = dir_.File("work");
    db_ = work_dir_ + "/dispatch.db";
    log_ = dir_.File("restart.log");
    dispatcher_ = std::make_unique<DispatcherProcess>(DispatcherProcess::Options{.work_dir = work_dir_});
  }

  TempDir dir_;
  std::string work_dir_;
  std::string db_;
  std::string log_;
  std::unique_ptr<DispatcherProcess> dispatcher_;
  Acked acked_;
};

TEST_F(JournalDamage, DeletedLastJournalRowIsRefusedNamingTheRecord) {
  {
    ClientLoop loop;
    DsClient client(loop, dispatcher_->address());
    AckChanges(client, 5, "d", acked_);
  }
  KillNine(dispatcher_);
  const std::string last = QueryOne(db_, "SELECT max(seq) FROM journal");
  ASSERT_FALSE(last.empty());
  ASSERT_EQ(QueryOne(db_, "DELETE FROM journal WHERE seq = " + last + " RETURNING seq"), last);
  ExpectRefusedOrLossless(work_dir_, log_, acked_, "record " + last + " is missing",
                          /*require_refusal=*/true);
}

TEST_F(JournalDamage, WalCutMidFrameIsRefusedNamingTheMissingRecords) {
  {
    ClientLoop loop;
    DsClient client(loop, dispatcher_->address());
    AckChanges(client, 5, "w", acked_);
  }
  KillNine(dispatcher_);
  const std::string wal = db_ + "-wal";
  const uint64_t end = WalFramesEnd(wal, 4096);
  ASSERT_GT(end, 32u + 2 * (4096 + 24)) << "the WAL holds no frames: was it checkpointed?";
  // Half of the last frame (24-byte header + a 4 KiB page) goes.
  std::filesystem::resize_file(wal, end - (4096 + 24) / 2);
  ExpectRefusedOrLossless(work_dir_, log_, acked_, "missing (the WAL", /*require_refusal=*/true);
}

TEST_F(JournalDamage, WalDeletedAfterAPartialCheckpointIsRefused) {
  {
    ClientLoop loop;
    DsClient client(loop, dispatcher_->address());
    // Enough commits for several checkpoints (one per 2048 WAL frames), then
    // a few that only the WAL holds.
    AckChanges(client, 700, "p", acked_);
  }
  KillNine(dispatcher_);
  ASSERT_TRUE(std::filesystem::remove(db_ + "-wal"));
  // Losing nothing would be fine too (if every commit had been copied into
  // the database); losing anything must be refused.
  ExpectRefusedOrLossless(work_dir_, log_, acked_, "missing (the WAL", /*require_refusal=*/false);
}

TEST_F(JournalDamage, FlippedDatasetRowIsRefusedAtStartNamingTheDataset) {
  {
    ClientLoop loop;
    DsClient client(loop, dispatcher_->address());
    AckChanges(client, 5, "f", acked_);
  }
  ASSERT_TRUE(dispatcher_->Terminate().has_value());
  dispatcher_.reset();
  FlipFirstDatasetByte(db_);
  ExpectRefusedOrLossless(work_dir_, log_, acked_, "fails its checksum", /*require_refusal=*/true);
  EXPECT_NE(ReadText(log_).find("dataset '"), std::string::npos);
}

// `dispatcher --verify` on a stopped work dir: exit 0 and a summary when it is
// clean, exit 1 naming the damage when it is not.
TEST_F(JournalDamage, VerifyReportsACleanAndADamagedWorkDir) {
  {
    ClientLoop loop;
    DsClient client(loop, dispatcher_->address());
    AckChanges(client, 5, "v", acked_);
  }
  KillNine(dispatcher_);
  auto verify = [&](std::string* out) {
    Subprocess process({DispatcherBinary(), "--verify", "--work-dir=" + work_dir_}, log_);
    out->clear();
    while (auto line = process.ReadLine(30s)) *out += *line + "\n";
    auto status = process.Wait(30s);
    *out += ReadText(log_);
    return status.has_value() && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  };
  std::string report;
  EXPECT_EQ(verify(&report), 0) << report;
  EXPECT_NE(report.find("clean"), std::string::npos) << report;
  EXPECT_NE(report.find("5 datasets"), std::string::npos) << report;
  // Verifying changed nothing: the dispatcher still starts and has it all.
  ExpectRefusedOrLossless(work_dir_, log_, acked_, "", /*require_refusal=*/false);

  const std::string last = QueryOne(db_, "SELECT max(seq) FROM journal");
  ASSERT_EQ(QueryOne(db_, "DELETE FROM journal WHERE seq = " + last + " RETURNING seq"), last);
  EXPECT_EQ(verify(&report), 1) << report;
  EXPECT_NE(report.find("record " + last + " is missing"), std::string::npos) << report;
}

}  // namespace
}  // namespace dispatch::testing
