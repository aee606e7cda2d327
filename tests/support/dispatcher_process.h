// DispatcherProcess: the real `dispatcher` binary started by a test on a free
// loopback port (or a Unix socket) with its own work dir, and its HTTP
// endpoints on another free port (unless extra_flags set --http). It is ready
// when it has printed "dispatcher listening on ADDRESS" on stdout (and, with
// HTTP on, "dispatcher status page on URL").
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {

// Path of the dispatcher binary under test (set by CMake).
const char* DispatcherBinary();

class DispatcherProcess {
 public:
  struct Options {
    // Empty: tcp on 127.0.0.1 with a port the kernel picks.
    std::string listen = "";
    // Empty: a fresh temp dir owned by this object.
    std::string work_dir = "";
    std::vector<std::string> extra_flags = {};
    // Non-empty: the dispatcher's stderr (its log) goes to this file.
    std::string stderr_path = "";
  };

  // Starts the binary and waits (deadline) for its listening line; throws
  // std::runtime_error if it does not come.
  explicit DispatcherProcess(Options options);
  DispatcherProcess() : DispatcherProcess(Options{}) {}

  const std::string& address() const { return address_; }
  // "http://127.0.0.1:PORT/", or empty when --http=off.
  const std::string& http_url() const { return http_url_; }
  const std::string& work_dir() const { return work_dir_; }
  Subprocess& process() { return *process_; }

  // SIGTERM and wait; returns the wait status (nullopt on timeout).
  std::optional<int> Terminate(std::chrono::milliseconds timeout = std::chrono::seconds(10));

 private:
  std::unique_ptr<TempDir> owned_dir_;
  std::string work_dir_;
  std::string address_;
  std::string http_url_;
  std::unique_ptr<Subprocess> process_;
};

}  // namespace dispatch::testing
