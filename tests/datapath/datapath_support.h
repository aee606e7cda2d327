// Helpers for the data-path tests: a real dispatcher with short client and
// job-GC timeouts, real dispatch-worker processes serving elements on ports
// the kernel picks (killable with -9 and restartable at the same address:
// then a Unix socket, SocketAddress()), and consumers (DatasetReader) read to
// the end on their own threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "clients/dataset_reader.h"
#include "tests/clients/client_test_support.h"

namespace dispatch::testing {

class DataCluster {
 public:
  explicit DataCluster(std::vector<std::string> dispatcher_flags = {});
  const std::string& dispatcher() const { return dispatcher_->address(); }
  DispatcherProcess& dispatcher_process() { return *dispatcher_; }

  // Starts worker `i` (at `address`, by default a free loopback port, on the
  // first start; at the address it had after a kill) and waits until it
  // registered. Returns its address, the bound one.
  std::string StartWorker(size_t i, std::vector<std::string> extra_flags = {},
                          std::string address = kFreeLoopbackPort);
  void Kill9Worker(size_t i);
  WorkerProcess& worker(size_t i) { return *workers_.at(i); }
  // An address for worker `i` that stays its own across a kill -9, for a
  // test that brings it back there: a Unix socket in the cluster's directory.
  // A freed TCP port could be taken by another process before the restart.
  std::string SocketAddress(size_t i) const;
  size_t num_workers() const { return workers_.size(); }

  // A reader of `definition` (a built-in kind, e.g. "range count=10 splits=2").
  clients::ReaderOptions ReaderOf(const std::string& definition, rpc::ProcessingMode mode) const;

 private:
  TempDir dir_;
  std::unique_ptr<DispatcherProcess> dispatcher_;
  std::map<size_t, std::string> addresses_;
  std::map<size_t, std::vector<std::string>> flags_;
  std::map<size_t, std::unique_ptr<WorkerProcess>> workers_;
};

// Reads a DatasetReader to its end on a thread of its own.
class BackgroundRead {
 public:
  explicit BackgroundRead(clients::ReaderOptions options);
  ~BackgroundRead();
  // Waits for the end; returns the status that ended the read.
  Status Join();
  uint64_t count() const;
  // Waits (woken by every element) until `n` elements were read or the read ended.
  bool WaitForCount(uint64_t n, std::chrono::milliseconds timeout = kTestDeadline);
  // Valid after Join().
  const std::vector<clients::Element>& elements() const { return elements_; }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t count_ = 0;  // guarded by mu_
  bool done_ = false;   // guarded by mu_
  std::vector<clients::Element> elements_;
  Status status_;
  std::thread thread_;
};

// The integers the elements of a `range` read carry, sorted.
std::vector<uint64_t> Values(const std::vector<clients::Element>& elements);
// The split of `value` in `range count=N splits=S`.
uint64_t SplitOf(uint64_t value, uint64_t count, uint64_t splits);

}  // namespace dispatch::testing
