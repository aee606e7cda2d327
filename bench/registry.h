// The subcommands of dispatch-bench. Each benchmark lives in its own file and
// registers itself with DISPATCH_BENCH; bench_main.cc dispatches on argv[1].
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace dispatch::bench {

struct BenchCommand {
  std::string name;
  std::string summary;
  // argv[0] is the subcommand name. Returns the process exit code.
  std::function<int(int argc, char** argv)> run;
};

std::vector<BenchCommand>& Registry();

struct Registrar {
  Registrar(std::string name, std::string summary, std::function<int(int, char**)> run) {
    Registry().push_back({std::move(name), std::move(summary), std::move(run)});
  }
};

}  // namespace dispatch::bench

#define DISPATCH_BENCH(name, summary, fn) \
  static ::dispatch::bench::Registrar dispatch_bench_registrar_##fn(name, summary, fn)
