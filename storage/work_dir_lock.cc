#include "storage/work_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace dispatch::storage {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

// Best effort: the holder's pid as written in the file, or "" if unreadable
// (the holder may not have written it yet).
std::string ReadHolderPid(int fd) {
  char buf[32] = {};
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return "";
  std::string pid(buf, static_cast<size_t>(n));
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  for (char c : pid) {
    if (c < '0' || c > '9') return "";
  }
  return pid;
}

}  // namespace

Result<std::unique_ptr<WorkDirLock>> WorkDirLock::Acquire(const std::string& work_dir) {
  std::string path = work_dir + "/LOCK";
  // No O_TRUNC: a refused opener must not erase the holder's pid.
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    return FailedPreconditionError("cannot open lock file " + path + " of work dir " + work_dir +
                                   ": " + ErrnoText(err));
  }
  int rc;
  do {
    rc = flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    std::string holder = ReadHolderPid(fd);
    close(fd);
    if (err == EWOULDBLOCK) {
      return FailedPreconditionError(
          "work dir " + work_dir + " is in use by another dispatcher (" +
          (holder.empty() ? std::string("holder pid unknown") : "pid " + holder) + " holds " +
          path + "); stop it or use another work dir");
    }
    return FailedPreconditionError("cannot lock " + path + " of work dir " + work_dir + ": " +
                                   ErrnoText(err));
  }
  // We hold the lock: record our pid for the next one who is refused. A
  // failure here is harmless for correctness, so it is not an error.
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) == 0) {
    [[maybe_unused]] ssize_t ignored = pwrite(fd, pid.data(), pid.size(), 0);
  }
  return std::unique_ptr<WorkDirLock>(new WorkDirLock(std::move(path), fd));
}

WorkDirLock::~WorkDirLock() { close(fd_); }

}  // namespace dispatch::storage
