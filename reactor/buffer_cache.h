// BufferCache: large byte buffers kept for reuse. A block of 32 MiB is beyond
// glibc's largest mmap threshold, so every fresh one is mapped anew and its
// first write faults on every page: copying a 32 MiB closure result into a
// fresh block held the loop ~60 ms on the 2-vCPU VM (profiled: 36% of the
// loop's time while large results arrived, nearly all in page faults). A
// buffer given back is faulted in already; the next copy into it is a plain
// memcpy. What is kept is bounded by `max_bytes` (capacity, not size).
// REQUIRES: one thread (the loop), except that a buffer handed out may be
// read anywhere until it is given back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dispatch::reactor {

class BufferCache {
 public:
  explicit BufferCache(size_t max_bytes) : max_bytes_(max_bytes) {}
  BufferCache(const BufferCache&) = delete;
  BufferCache& operator=(const BufferCache&) = delete;

  // A buffer holding a copy of `bytes`: the smallest kept one with room for
  // them, else a new one.
  std::unique_ptr<std::string> Copy(std::string_view bytes) {
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i]->capacity() >= bytes.size() &&
          (best == free_.size() || free_[i]->capacity() < free_[best]->capacity())) {
        best = i;
      }
    }
    if (best == free_.size()) return std::make_unique<std::string>(bytes);
    std::unique_ptr<std::string> buffer = std::move(free_[best]);
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
    kept_bytes_ -= buffer->capacity();
    buffer->assign(bytes);  // within its capacity: no allocation
    ++reused_;
    return buffer;
  }

  // Keeps `buffer` for a later Copy when it fits the bound; else frees it.
  void GiveBack(std::unique_ptr<std::string> buffer) {
    if (buffer == nullptr || kept_bytes_ + buffer->capacity() > max_bytes_) return;
    kept_bytes_ += buffer->capacity();
    free_.push_back(std::move(buffer));
  }

  size_t kept_bytes() const { return kept_bytes_; }
  size_t kept() const { return free_.size(); }
  uint64_t reused() const { return reused_; }

 private:
  const size_t max_bytes_;
  std::vector<std::unique_ptr<std::string>> free_;
  size_t kept_bytes_ = 0;
  uint64_t reused_ = 0;
};

}  // namespace dispatch::reactor
