// The exclusive lock on a work dir: flock(LOCK_EX) on <work_dir>/LOCK, held for
// the life of the object, released by the kernel when the process dies (so a
// kill -9 never leaves a stale lock). The holder writes its pid into the file
// so that a refused second dispatcher can say who holds the dir.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace dispatch::storage {

class WorkDirLock {
 public:
  // Creates <work_dir>/LOCK if missing and locks it without waiting.
  // FailedPrecondition naming the dir (and the holder's pid when known) if
  // another process, or another WorkDirLock in this process, holds it.
  // The descriptor is O_CLOEXEC: processes we spawn never inherit the lock.
  static Result<std::unique_ptr<WorkDirLock>> Acquire(const std::string& work_dir);

  WorkDirLock(const WorkDirLock&) = delete;
  WorkDirLock& operator=(const WorkDirLock&) = delete;
  // Closing the descriptor releases the lock. The pid stays in the file; it
  // means nothing once the lock is free.
  ~WorkDirLock();

  const std::string& path() const { return path_; }

 private:
  WorkDirLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::string path_;
  int fd_;
};

}  // namespace dispatch::storage
