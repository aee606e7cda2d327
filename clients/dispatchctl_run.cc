#include "clients/dispatchctl_run.h"

#include <stdio.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>

#include "clients/coordinator.h"

namespace dispatch::clients {

void DeclareRunFlags(FlagParser& parser, RunFlags& flags) {
  parser.AddUint("count", "run: how many closures to schedule", &flags.count, 1, 1000000);
  parser.AddCustom(
      "priority", "N",
      "run: the closures' priority (higher runs first, FIFO within a priority; -2147483648.."
      "2147483647)",
      "0", [&flags](const std::string& value) {
        char* end = nullptr;
        errno = 0;
        const long long n = std::strtoll(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || errno != 0 || n < INT32_MIN || n > INT32_MAX) {
          return InvalidArgumentError("--priority=" + value +
                                      " is not an integer in -2147483648..2147483647");
        }
        flags.priority = n;
        return Status::Ok();
      });
  parser.AddUint("closure-timeout-ms", "run: each closure fails with DeadlineExceeded this long after "
                 "it is scheduled (0: no timeout)",
                 &flags.timeout_ms, 0, UINT32_MAX);
  parser.AddUint("cancel-after-ms", "run: this long after scheduling, cancel every closure not "
                 "done yet (Coordinator.cancel; 0: never)",
                 &flags.cancel_after_ms, 0, 24ull * 3600 * 1000);
  parser.AddBool("chain",
                 "run: a dependency chain: each closure after the first gets the previous "
                 "one's result as its input",
                 &flags.chain);
}

std::string CheckRunArgs(const std::vector<std::string>& args) {
  if (args.size() < 2 || args.size() > 3) {
    return "'run' takes a closure function and optional args: run FUNCTION [ARGS]";
  }
  if (args[1].empty()) return "'run' needs a non-empty function name";
  return "";
}

int RunClosures(const std::string& dispatcher, const std::string& token,
                const std::vector<std::string>& args, const RunFlags& flags) {
  CoordinatorOptions options;
  options.dispatcher_address = dispatcher;
  options.token = token;
  Result<std::unique_ptr<Coordinator>> coordinator = Coordinator::Create(options);
  if (!coordinator.ok()) {
    fprintf(stderr, "dispatchctl: %s\n", coordinator.status().ToString().c_str());
    return 1;
  }
  const std::string function = args[1];
  const std::string closure_args = args.size() > 2 ? args[2] : "";
  std::vector<RemoteValue> values;
  for (uint64_t i = 0; i < flags.count; ++i) {
    ScheduleOptions schedule;
    schedule.priority = static_cast<int32_t>(flags.priority);
    schedule.timeout = std::chrono::milliseconds(flags.timeout_ms);
    if (flags.chain && !values.empty()) schedule.inputs.push_back(values.back());
    Result<RemoteValue> value = (*coordinator)->Schedule(function, closure_args, schedule);
    if (!value.ok()) {
      fprintf(stderr, "dispatchctl: scheduling %s failed: %s\n", function.c_str(),
              value.status().ToString().c_str());
      return 1;
    }
    values.push_back(*value);
  }
  if (flags.cancel_after_ms > 0) {
    // A command-line tool waiting on the user's behalf, not a test.
    std::this_thread::sleep_for(std::chrono::milliseconds(flags.cancel_after_ms));
    std::vector<uint64_t> pending;
    for (const RemoteValue& value : values) {
      if (value.status() == RemoteValueStatus::kPending && value.closure_id() != 0)
        pending.push_back(value.closure_id());
    }
    Result<std::vector<RemoteValueStatus>> cancelled = (*coordinator)->Cancel(pending);
    if (!cancelled.ok()) {
      fprintf(stderr, "dispatchctl: cancelling %zu closures failed: %s\n", pending.size(),
              cancelled.status().ToString().c_str());
      return 1;
    }
  }
  Status joined = (*coordinator)->Join();
  int failed = 0;
  size_t cancelled = 0;
  for (const RemoteValue& value : values) {
    Result<std::string> result = value.FetchFor(std::chrono::seconds(30));
    if (!result.ok() && result.status().code() == StatusCode::kCancelled &&
        flags.cancel_after_ms > 0) {
      ++cancelled;
      printf("closure %llu %s(%s) cancelled\n", static_cast<unsigned long long>(value.closure_id()),
             function.c_str(), closure_args.c_str());
    } else if (result.ok()) {
      printf("closure %llu %s(%s) -> %s\n", static_cast<unsigned long long>(value.closure_id()),
             function.c_str(), closure_args.c_str(), result->c_str());
    } else {
      ++failed;
      printf("closure %llu %s(%s) failed: %s\n",
             static_cast<unsigned long long>(value.closure_id()), function.c_str(),
             closure_args.c_str(), result.status().ToString().c_str());
    }
  }
  const std::string cancels =
      flags.cancel_after_ms > 0 ? ", " + std::to_string(cancelled) + " cancelled" : "";
  printf("ran %zu closures of %s: %zu finished, %d failed%s%s\n", values.size(),
         function.c_str(), values.size() - failed - cancelled, failed, cancels.c_str(),
         joined.ok() ? "" : (" (join: " + joined.ToString() + ")").c_str());
  (*coordinator)->Close();
  return failed == 0 && joined.ok() ? 0 : 1;
}

}  // namespace dispatch::clients
