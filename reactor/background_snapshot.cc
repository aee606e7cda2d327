#include "reactor/background_snapshot.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "reactor/uvkj/uv_handle.h"
#include "state/codec.h"

namespace dispatch::reactor {
namespace {

uint64_t NowMicros() { return uv_hrtime() / 1000; }

// The child's report is one line: "OK <size> <crc> <micros> <name>" or
// "ERR <code> <message>".
void WriteReport(int fd, const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the parent is gone: nobody to tell
    done += static_cast<size_t>(n);
  }
}

std::string OneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  return text;
}

}  // namespace

BackgroundSnapshot::BackgroundSnapshot(uv_loop_t* loop, std::string work_dir, uint64_t max_bytes)
    : loop_(loop), work_dir_(std::move(work_dir)), max_bytes_(max_bytes) {}

BackgroundSnapshot::~BackgroundSnapshot() { Abort(); }

Status BackgroundSnapshot::Start(const state::DispatcherState& state, uint64_t seq, DoneFn done) {
  if (in_flight()) {
    return FailedPreconditionError("a snapshot at record " + std::to_string(seq_) +
                                   " is still being written");
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return UnavailableError(std::string("cannot create the snapshot child's pipe: ") +
                            std::strerror(errno));
  }
  const pid_t parent = getpid();
  outcome_ = SnapshotOutcome();
  outcome_.started_ns = uv_hrtime();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    return UnavailableError(std::string("cannot fork the snapshot child: ") + std::strerror(err));
  }
  if (pid == 0) {
    close(fds[0]);
    // Die with the parent: the new dispatcher will remove our temp file.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    RunChild(state, seq, fds[1]);
  }
  outcome_.fork_micros = (uv_hrtime() - outcome_.started_ns) / 1000;
  close(fds[1]);
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  pid_ = pid;
  seq_ = seq;
  report_fd_ = fds[0];
  report_.clear();
  report_closed_ = false;
  done_ = std::move(done);
  poll_ = new uv_poll_t;
  uvkj::CheckUv(uv_poll_init(loop_, poll_, report_fd_), "uv_poll_init");
  poll_->data = this;
  uvkj::CheckUv(uv_poll_start(poll_, UV_READABLE | UV_DISCONNECT, &BackgroundSnapshot::OnReadable),
                "uv_poll_start");
  return Status::Ok();
}

void BackgroundSnapshot::RunChild(const state::DispatcherState& state, uint64_t seq,
                                  int report_fd) {
  // Only our pipe stays open: the child must not keep the parent's sockets
  // (a closed connection would stay open for the peer) or the SQLite files.
  if (report_fd > 3) close_range(3, report_fd - 1, 0);
  close_range(report_fd + 1, ~0u, 0);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGPIPE, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // On a small machine the loop thread must win the CPU over us.
  setpriority(PRIO_PROCESS, 0, 10);
  const uint64_t start = NowMicros();
  if (fault_ == SnapshotChildFault::kExitBeforeWriting) _exit(1);
  std::string line;
  try {
    std::string bytes = state::EncodeSnapshot(state);
    if (bytes.size() > max_bytes_) {
      line = "ERR " + std::to_string(static_cast<int>(StatusCode::kResourceExhausted)) +
             " snapshot at record " + std::to_string(seq) + " is " + std::to_string(bytes.size()) +
             " bytes, over the limit of " + std::to_string(max_bytes_) + "\n";
    } else {
      auto info = storage::WriteSnapshotFile(work_dir_, seq, bytes);
      if (info.ok()) {
        if (fault_ == SnapshotChildFault::kCrashAfterWriting) raise(SIGKILL);
        line = "OK " + std::to_string(info->size) + " " + std::to_string(info->crc) + " " +
               std::to_string(NowMicros() - start) + " " + info->name + "\n";
      } else {
        line = "ERR " + std::to_string(static_cast<int>(info.status().code())) + " " +
               OneLine(info.status().message()) + "\n";
      }
    }
  } catch (const std::exception& e) {
    line = "ERR " + std::to_string(static_cast<int>(StatusCode::kInternal)) +
           " encoding the snapshot failed: " + OneLine(e.what()) + "\n";
  } catch (...) {
    line = "ERR " + std::to_string(static_cast<int>(StatusCode::kInternal)) +
           " encoding the snapshot failed\n";
  }
  WriteReport(report_fd, line);
  // No destructors, no atexit handlers, no stdio flush: they belong to the parent.
  _exit(0);
}

void BackgroundSnapshot::OnReadable(uv_poll_t* handle, int status, int /*events*/) {
  auto* self = static_cast<BackgroundSnapshot*>(handle->data);
  if (self == nullptr) return;
  if (status < 0) {
    self->report_closed_ = true;
    self->StopWatching();
    self->TryReap();
    return;
  }
  self->ReadReport();
}

void BackgroundSnapshot::ReadReport() {
  char buffer[4096];
  while (true) {
    const ssize_t n = read(report_fd_, buffer, sizeof(buffer));
    if (n > 0) {
      // A report is one short line; anything longer is not ours to keep.
      if (report_.size() < 65536) report_.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    break;  // EOF (the child exited or died) or an error: either way it is over
  }
  report_closed_ = true;
  StopWatching();
  TryReap();
}

void BackgroundSnapshot::StopWatching() {
  if (poll_ != nullptr) {
    uv_poll_stop(poll_);
    uvkj::CloseAndDelete(poll_);
    poll_ = nullptr;
  }
  if (report_fd_ >= 0) {
    close(report_fd_);
    report_fd_ = -1;
  }
}

void BackgroundSnapshot::TryReap() {
  int wstatus = 0;
  const pid_t rc = waitpid(pid_, &wstatus, WNOHANG);
  if (rc == 0) {
    // The pipe closed a moment before the child is gone (tearing down a big
    // copy-on-write image takes a while): look again soon, without blocking.
    if (reap_timer_ == nullptr) {
      reap_timer_ = new uv_timer_t;
      uv_timer_init(loop_, reap_timer_);
      reap_timer_->data = this;
      uv_timer_start(
          reap_timer_,
          [](uv_timer_t* timer) {
            auto* self = static_cast<BackgroundSnapshot*>(timer->data);
            if (self != nullptr) self->TryReap();
          },
          1, 1);
    }
    return;
  }
  if (reap_timer_ != nullptr) {
    uv_timer_stop(reap_timer_);
    uvkj::CloseAndDelete(reap_timer_);
    reap_timer_ = nullptr;
  }
  Status status;
  if (rc < 0) {
    status = InternalError(std::string("waitpid on the snapshot child failed: ") +
                           std::strerror(errno));
  } else if (WIFSIGNALED(wstatus)) {
    status = UnavailableError("the snapshot child was killed by signal " +
                              std::to_string(WTERMSIG(wstatus)));
  } else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0) {
    status = UnavailableError("the snapshot child exited with code " +
                              std::to_string(WEXITSTATUS(wstatus)));
  }
  Finish(std::move(status));
}

void BackgroundSnapshot::Finish(Status status) {
  if (status.ok()) {
    char name[128] = {0};
    unsigned long long size = 0, micros = 0;
    unsigned long crc = 0;
    int code = 0;
    if (std::sscanf(report_.c_str(), "OK %llu %lu %llu %127s", &size, &crc, &micros, name) == 4) {
      outcome_.info.seq = seq_;
      outcome_.info.size = size;
      outcome_.info.crc = static_cast<uint32_t>(crc);
      outcome_.info.name = name;
      outcome_.child_micros = micros;
    } else if (std::sscanf(report_.c_str(), "ERR %d", &code) == 1) {
      const size_t text = report_.find(' ', 4);
      std::string message = text == std::string::npos ? "" : report_.substr(text + 1);
      while (!message.empty() && message.back() == '\n') message.pop_back();
      status = Status(static_cast<StatusCode>(code), message);
      if (status.ok()) status = InternalError("the snapshot child reported code 0 as an error");
    } else {
      status = InternalError("the snapshot child exited without a report");
    }
  }
  if (!status.ok()) unlink((work_dir_ + "/" + storage::SnapshotTempFileName(seq_)).c_str());
  outcome_.status = std::move(status);
  outcome_.total_micros = (uv_hrtime() - outcome_.started_ns) / 1000;
  pid_ = 0;
  DoneFn done = std::move(done_);
  done_ = nullptr;
  if (done) done(std::move(outcome_));
}

void BackgroundSnapshot::Abort() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int wstatus = 0;
  while (waitpid(pid_, &wstatus, 0) < 0 && errno == EINTR) {
  }
  StopWatching();
  if (reap_timer_ != nullptr) {
    uv_timer_stop(reap_timer_);
    uvkj::CloseAndDelete(reap_timer_);
    reap_timer_ = nullptr;
  }
  unlink((work_dir_ + "/" + storage::SnapshotTempFileName(seq_)).c_str());
  pid_ = 0;
  done_ = nullptr;
}

}  // namespace dispatch::reactor
