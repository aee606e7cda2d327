#include "tests/storage/test_util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace dispatch::storage::testing {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::string Bytes(uint64_t seed, size_t size) {
  std::string out(size, '\0');
  uint64_t state = seed;
  for (size_t i = 0; i < size; ++i) {
    if (i % 8 == 0) state = SplitMix(state);
    out[i] = static_cast<char>(state >> (8 * (i % 8)));
  }
  return out;
}

}  // namespace

StoreOptions OptionsFor(const std::string& dir, Synchronous sync) {
  StoreOptions options;
  options.work_dir = dir;
  options.synchronous = sync;
  return options;
}

Result<Records> ReplayAll(Store& store, uint64_t after_seq) {
  Records records;
  Status status = store.Replay(after_seq, [&](uint64_t seq, std::string_view bytes) {
    records.emplace_back(seq, std::string(bytes));
    return Status::Ok();
  });
  if (!status.ok()) return status;
  return records;
}

JournalBatch PayloadBatch(uint64_t first, int count) {
  JournalBatch batch;
  for (int i = 0; i < count; ++i) batch.AddRecord(RecordPayload(first + i));
  return batch;
}

Status ThreadedCheckpoints::Finish() {
  worker_.join();
  if (!result_.ok()) return result_.status();
  auto finished = store_.FinishCheckpoint(*result_);
  if (!finished.ok()) return finished.status();
  inline_passes_ += finished->passes;
  return Status::Ok();
}

Status ThreadedCheckpoints::Poll() {
  if (worker_.joinable() && !running_.load(std::memory_order_acquire)) {
    DISPATCH_RETURN_IF_ERROR(Finish());
  }
  if (!worker_.joinable() && store_.WantsCheckpoint()) {
    running_.store(true, std::memory_order_relaxed);
    ++started_;
    worker_ = std::thread([this] {
      result_ = checkpointer_.Checkpoint();
      running_.store(false, std::memory_order_release);
    });
  }
  return Status::Ok();
}

Status ThreadedCheckpoints::Drain() {
  if (!worker_.joinable()) return Status::Ok();
  return Finish();
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                        "/dispatch-storage-test-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

uint64_t TestSeed(const char* test_name) {
  uint64_t seed;
  const char* env = std::getenv("DISPATCH_TEST_SEED");
  if (env != nullptr && *env != '\0') {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  std::printf("[ seed     ] %s: seed %llu (reproduce with DISPATCH_TEST_SEED=%llu)\n", test_name,
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  return seed;
}

std::string RecordPayload(uint64_t seq) {
  const uint64_t h = SplitMix(seq * 2 + 1);
  return Bytes(h, 1 + h % 2000);
}

std::string SnapshotPayload(uint64_t seq) {
  const uint64_t h = SplitMix(seq * 2 + 0x5157);
  return "snapshot@" + std::to_string(seq) + Bytes(h, 5000 + h % 20000);
}

std::string DatasetPayload(const std::string& key) {
  uint64_t h = 1469598103934665603ull;
  for (char c : key) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return "dataset:" + key + Bytes(h, 100 + h % 3000);
}

ChildProcess::ChildProcess(const std::string& path, const std::vector<std::string>& args) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    std::perror("pipe2");
    std::abort();
  }
  std::vector<std::string> argv_storage;
  argv_storage.push_back(path);
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = fork();
  if (pid_ < 0) {
    std::perror("fork");
    std::abort();
  }
  if (pid_ == 0) {
    dup2(fds[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the new descriptor
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  out_fd_ = fds[0];
}

ChildProcess::~ChildProcess() {
  if (!reaped_) {
    Kill(SIGKILL);
    Wait();
  }
  if (out_fd_ >= 0) close(out_fd_);
}

std::optional<std::string> ChildProcess::ReadLine(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const size_t newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd pfd{out_fd_, POLLIN, 0};
    const int rc = poll(&pfd, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return std::nullopt;
    char chunk[4096];
    const ssize_t n = read(out_fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;  // EOF: the child is gone
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

void ChildProcess::Kill(int signal) {
  if (!reaped_) kill(pid_, signal);
}

int ChildProcess::Wait() {
  if (reaped_) return 0;
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  return status;
}

std::string HelperPath() { return STORAGE_TEST_HELPER_PATH; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::string> SnapshotFilesIn(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (IsSnapshotFileName(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string RawSql(const std::string& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  std::string error;
  if (rc == SQLITE_OK) {
    char* message = nullptr;
    rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message);
    if (rc != SQLITE_OK) error = message != nullptr ? message : sqlite3_errstr(rc);
    sqlite3_free(message);
  } else {
    error = sqlite3_errstr(rc);
  }
  sqlite3_close(db);
  return error;
}

}  // namespace dispatch::storage::testing
