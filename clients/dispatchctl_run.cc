#include "clients/dispatchctl_run.h"

#include <stdio.h>

#include <chrono>

#include "clients/coordinator.h"

namespace dispatch::clients {

void DeclareRunFlags(FlagParser& parser, RunFlags& flags) {
  parser.AddUint("count", "run: how many closures to schedule", &flags.count, 1, 1000000);
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
    if (flags.chain && !values.empty()) schedule.inputs.push_back(values.back());
    Result<RemoteValue> value = (*coordinator)->Schedule(function, closure_args, schedule);
    if (!value.ok()) {
      fprintf(stderr, "dispatchctl: scheduling %s failed: %s\n", function.c_str(),
              value.status().ToString().c_str());
      return 1;
    }
    values.push_back(*value);
  }
  Status joined = (*coordinator)->Join();
  int failed = 0;
  for (const RemoteValue& value : values) {
    Result<std::string> result = value.FetchFor(std::chrono::seconds(30));
    if (result.ok()) {
      printf("closure %llu %s(%s) -> %s\n", static_cast<unsigned long long>(value.closure_id()),
             function.c_str(), closure_args.c_str(), result->c_str());
    } else {
      ++failed;
      printf("closure %llu %s(%s) failed: %s\n",
             static_cast<unsigned long long>(value.closure_id()), function.c_str(),
             closure_args.c_str(), result.status().ToString().c_str());
    }
  }
  printf("ran %zu closures of %s: %zu finished, %d failed%s\n", values.size(), function.c_str(),
         values.size() - failed, failed,
         joined.ok() ? "" : (" (join: " + joined.ToString() + ")").c_str());
  (*coordinator)->Close();
  return failed == 0 && joined.ok() ? 0 : 1;
}

}  // namespace dispatch::clients
