#include "storage/backup_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <utility>

#include "storage/commit_mark.h"
#include "storage/file_io.h"
#include "storage/result_file.h"

namespace dispatch::storage {
namespace {

constexpr char kDatabaseName[] = "dispatch.db";
constexpr size_t kCopyChunk = 1u << 20;

// The first entry of `dir` (empty when there is none).
Result<std::string> FirstEntry(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return UnavailableError("cannot list " + dir + ": " + ErrnoText(errno));
  std::string found;
  while (const dirent* entry = readdir(d)) {
    const std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    found = std::string(name);
    break;
  }
  closedir(d);
  return found;
}

std::string Parent(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

Status PrepareCreated(const std::string& target, bool created) {
  const std::string results = target + "/" + kResultDirName;
  if (mkdir(results.c_str(), 0755) != 0) {
    return UnavailableError("cannot create " + results + ": " + ErrnoText(errno));
  }
  // Synced before anything else is written: see the top of the header.
  DISPATCH_RETURN_IF_ERROR(WriteInitializedMarker(target));
  return created ? FsyncDir(Parent(target)) : Status::Ok();
}

// Copies the open `fd` into the new file `path`, synced; its size.
Result<uint64_t> CopyOpenFile(int fd, const std::string& from, const std::string& path) {
  struct stat st;
  if (fstat(fd, &st) != 0) return UnavailableError("cannot stat " + from + ": " + ErrnoText(errno));
  const int out = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) return UnavailableError("cannot create " + path + ": " + ErrnoText(errno));
  std::unique_ptr<char[]> buffer(new char[kCopyChunk]);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  Status status;
  for (uint64_t done = 0; status.ok() && done < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(size - done, kCopyChunk));
    status = ReadAll(fd, buffer.get(), n, done, from);
    if (status.ok()) status = WriteAll(out, buffer.get(), n, done, path);
    done += n;
  }
  if (status.ok() && fdatasync(out) != 0) {
    status = UnavailableError("fdatasync of " + path + " failed: " + ErrnoText(errno));
  }
  if (close(out) != 0 && status.ok()) {
    status = UnavailableError("closing " + path + " failed: " + ErrnoText(errno));
  }
  if (!status.ok()) return status;
  return size;
}

}  // namespace

Status PrepareBackupDir(const std::string& target, bool* created) {
  *created = false;
  const std::string refusal = ": a backup goes into a new or empty directory";
  struct stat st;
  if (stat(target.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      return FailedPreconditionError(target + " exists and is not a directory" + refusal);
    }
    auto first = FirstEntry(target);
    if (!first.ok()) return first.status();
    if (!first->empty()) {
      return FailedPreconditionError(target + " is not empty (it holds " + *first + ")" + refusal);
    }
  } else if (errno != ENOENT) {
    return UnavailableError("cannot stat " + target + ": " + ErrnoText(errno));
  } else if (mkdir(target.c_str(), 0755) != 0) {
    const int err = errno;
    if (err == ENOENT) {
      return FailedPreconditionError("the directory " + Parent(target) + " that would hold " +
                                     target + " does not exist");
    }
    return UnavailableError("cannot create " + target + ": " + ErrnoText(err));
  } else {
    *created = true;
  }
  Status status = PrepareCreated(target, *created);
  if (!status.ok()) RemoveBackupDir(target, *created);
  return status;
}

PinnedFiles::PinnedFiles(PinnedFiles&& other) noexcept
    : files_(std::move(other.files_)), opened_(std::exchange(other.opened_, 0)) {
  other.files_.clear();
}

PinnedFiles& PinnedFiles::operator=(PinnedFiles&& other) noexcept {
  if (this != &other) {
    CloseAll();
    files_ = std::move(other.files_);
    opened_ = std::exchange(other.opened_, 0);
    other.files_.clear();
  }
  return *this;
}

PinnedFiles::~PinnedFiles() { CloseAll(); }

void PinnedFiles::Add(std::string name, int fd) {
  files_.push_back(File{std::move(name), fd});
  if (fd >= 0) ++opened_;
}

void PinnedFiles::CloseAll() {
  for (File& file : files_) {
    if (file.fd >= 0) close(file.fd);
    file.fd = -1;
  }
}

Result<PinnedFiles> PinWorkDirFiles(const std::string& work_dir, const std::string& snapshot_file,
                                    const std::string& target, size_t max_opened) {
  PinnedFiles pinned;
  // `required`: the database names it, so it must be there. A result file
  // may be removed by the thread pool after the listing: only once its
  // release was durable, so the copy (which holds that release) needs it not.
  auto pin = [&](const std::string& name, bool required) -> Status {
    const std::string from = work_dir + "/" + name;
    const std::string to = target + "/" + name;
    if (link(from.c_str(), to.c_str()) == 0) {
      pinned.Add(name, -1);
      return Status::Ok();
    }
    int err = errno;
    if (err != ENOENT && err != EEXIST) {
      // Another file system, or one without hard links: copied later, from
      // a descriptor opened now.
      if (pinned.opened() >= max_opened) {
        return ResourceExhaustedError(
            "cannot link " + from + " into " + target + " (" + ErrnoText(err) + ") and " +
            std::to_string(max_opened) +
            " files are to be copied already, the most one backup copies: back up to a "
            "directory on the work dir's file system, where files are linked");
      }
      const int fd = open(from.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        pinned.Add(name, fd);
        return Status::Ok();
      }
      err = errno;
    }
    if (err == ENOENT && !required) return Status::Ok();
    if (err == ENOENT) {
      return DataLossError("the snapshot file " + from + " that the database names is missing");
    }
    return UnavailableError("cannot link " + from + " to " + to + ": " + ErrnoText(err));
  };
  if (!snapshot_file.empty()) DISPATCH_RETURN_IF_ERROR(pin(snapshot_file, /*required=*/true));
  auto listing = ListResultFiles(work_dir + "/" + kResultDirName);
  if (!listing.ok()) return listing.status();
  for (const ResultFileId& id : listing->files) {
    DISPATCH_RETURN_IF_ERROR(pin(std::string(kResultDirName) + "/" +
                                     ResultFileName(id.closure_id, id.attempt),
                                 /*required=*/false));
  }
  return pinned;
}

Result<CompletedBackup> CompleteBackupDir(const std::string& target, PinnedFiles& pinned,
                                          uint64_t last_seq) {
  CompletedBackup done;
  Status status;
  for (const PinnedFiles::File& file : pinned.files()) {
    if (file.fd < 0) continue;
    auto copied = CopyOpenFile(file.fd, "the work dir's " + file.name, target + "/" + file.name);
    if (!copied.ok()) {
      status = copied.status();
      break;
    }
    done.copied_bytes += *copied;
  }
  pinned.CloseAll();
  DISPATCH_RETURN_IF_ERROR(status);
  // The entries of every file the database names are durable before the
  // database is there under its final name.
  DISPATCH_RETURN_IF_ERROR(FsyncDir(target + "/" + kResultDirName));
  DISPATCH_RETURN_IF_ERROR(FsyncDir(target));
  const std::string partial = target + "/" + kPartialDatabaseName;
  const std::string database = target + "/" + kDatabaseName;
  DISPATCH_RETURN_IF_ERROR(FsyncFile(partial));
  struct stat st;
  if (stat(partial.c_str(), &st) != 0) {
    return UnavailableError("cannot stat " + partial + ": " + ErrnoText(errno));
  }
  done.database_bytes = static_cast<uint64_t>(st.st_size);
  if (rename(partial.c_str(), database.c_str()) != 0) {
    return UnavailableError("cannot rename " + partial + " to " + database + ": " + ErrnoText(errno));
  }
  // The mark says how far the copy's journal reaches, as a work dir's does
  // (commit_mark.h): synced, since the copy is. Written whole and synced
  // with the directory, which makes the rename durable too.
  CommitMarkValue mark;
  mark.seq = last_seq;
  mark.synced = true;
  mark.boot_id = CurrentBootId();
  auto written = CommitMark::Open(target, mark, /*reset=*/true);
  if (!written.ok()) return written.status();
  return done;
}

void RemoveBackupDir(const std::string& target, bool created) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(target, ec)) {
    std::error_code ignored;
    std::filesystem::remove_all(entry.path(), ignored);
  }
  if (created) rmdir(target.c_str());
}

}  // namespace dispatch::storage
