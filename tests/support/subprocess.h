// Subprocess: a real child process for tests: started with fork/exec, its
// stdout read line by line through a pipe, its exit awaited through a pidfd
// with a deadline (poll, never sleep). The destructor kills and reaps it, so
// a failing test leaves no process behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace dispatch::testing {

class Subprocess {
 public:
  // argv[0] is the program path. stderr is inherited (it shows in ctest's
  // output on failure); stdout is captured.
  // A non-empty `stderr_path` sends stderr to that file instead (a test that
  // reads what the process logged).
  explicit Subprocess(std::vector<std::string> argv, const std::string& stderr_path = "");
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }

  // The next line of stdout without its newline; nullopt at EOF or when the
  // deadline passes first.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout);

  void Signal(int signum);

  // Waits for the process to end. Returns the raw wait status, or nullopt
  // if it is still running at the deadline.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  bool running() const { return !exited_; }

 private:
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int stdout_fd_ = -1;
  std::string buffer_;
  bool exited_ = false;
  int status_ = 0;
};

}  // namespace dispatch::testing
