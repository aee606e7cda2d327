#include "tests/support/dispatcher_process.h"

#include <signal.h>
#include <stdlib.h>

#include <stdexcept>

namespace dispatch::testing {

// $DISPATCH_TEST_DISPATCHER runs the tests against another build (e.g. an
// older one, to see a new test fail there).
const char* DispatcherBinary() {
  const char* other = getenv("DISPATCH_TEST_DISPATCHER");
  return other != nullptr && *other != '\0' ? other : DISPATCH_DISPATCHER_BINARY;
}

DispatcherProcess::DispatcherProcess(Options options) {
  if (options.work_dir.empty()) {
    owned_dir_ = std::make_unique<TempDir>();
    work_dir_ = owned_dir_->path() + "/work";
  } else {
    work_dir_ = options.work_dir;
  }
  std::string listen = options.listen.empty() ? "tcp:127.0.0.1:0" : options.listen;
  std::vector<std::string> argv = {DispatcherBinary(), "--listen=" + listen, "--work-dir=" + work_dir_,
                                   "--log-level=warning"};
  bool http_off = false;
  bool http_set = false;
  for (auto& flag : options.extra_flags) {
    if (flag.rfind("--http=", 0) == 0) {
      http_set = true;
      http_off = flag == "--http=off";
    }
  }
  // Never the default port 8050: suites share the machine.
  if (!http_set) argv.push_back("--http=tcp:127.0.0.1:0");
  for (auto& flag : options.extra_flags) argv.push_back(flag);
  process_ = std::make_unique<Subprocess>(argv, options.stderr_path);

  static const std::string kPrefix = "dispatcher listening on ";
  auto line = process_->ReadLine(std::chrono::seconds(30));
  if (!line || line->rfind(kPrefix, 0) != 0) {
    throw std::runtime_error("dispatcher did not report its address; got: " + line.value_or("<nothing>"));
  }
  address_ = line->substr(kPrefix.size());
  if (!http_off) {
    static const std::string kHttpPrefix = "dispatcher status page on ";
    auto http = process_->ReadLine(std::chrono::seconds(30));
    if (!http || http->rfind(kHttpPrefix, 0) != 0) {
      throw std::runtime_error("dispatcher did not report its status page; got: " + http.value_or("<nothing>"));
    }
    http_url_ = http->substr(kHttpPrefix.size());
  }
}

std::optional<int> DispatcherProcess::Terminate(std::chrono::milliseconds timeout) {
  process_->Signal(SIGTERM);
  return process_->Wait(timeout);
}

}  // namespace dispatch::testing
