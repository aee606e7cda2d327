// SlowFsyncWindow: of the last `size` fsyncs of small group commits, how many
// took longer than a bound. DurableState fsyncs a small commit on the loop
// thread only while at most one of them did, i.e. while the recent tail
// (about the 99th percentile, with 128) of such fsyncs is under the bound.
//
// Why a count and not "none for a while after a slow one": on a VM's disk
// an fsync of one page takes over 1 ms now and then whatever the load
// (measured: 5 of 2,000 while closures ran one at a time), and a timed
// quiet period after each kept the loop off the disk nearly always, though
// the fsyncs it skipped would have been quick. A disk that is slow for a
// while (behind a snapshot's writes: 5% of small fsyncs over 1 ms, up to
// 11 ms on the loop) fills the window with slow ones and keeps the loop
// off it until as many quick ones have been seen since.
// REQUIRES: one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dispatch::reactor {

class SlowFsyncWindow {
 public:
  // slow_ns: an fsync longer than this is slow. size: fsyncs remembered.
  SlowFsyncWindow(uint64_t slow_ns, size_t size) : slow_ns_(slow_ns), slow_(size, false) {}

  void Add(uint64_t fsync_ns) {
    if (slow_.empty()) return;
    const bool slow = fsync_ns > slow_ns_;
    slow_count_ += static_cast<size_t>(slow) - static_cast<size_t>(slow_[next_]);
    slow_[next_] = slow;
    next_ = (next_ + 1) % slow_.size();
  }

  // How many of the remembered fsyncs were slow.
  size_t slow_count() const { return slow_count_; }

  // True while the loop may fsync: at most one remembered fsync was slow.
  bool quick() const { return slow_count_ <= 1; }

 private:
  const uint64_t slow_ns_;
  std::vector<bool> slow_;  // a ring; false where nothing was added yet
  size_t next_ = 0;
  size_t slow_count_ = 0;
};

}  // namespace dispatch::reactor
