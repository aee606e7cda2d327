// dispatch-bench: the load harness. `dispatch-bench <command> [flags]`; each
// command prints a table of what it measured. Benchmarks report, never assert.
#include <cstdio>
#include <cstring>

#include "bench/registry.h"

namespace dispatch::bench {

std::vector<BenchCommand>& Registry() {
  static std::vector<BenchCommand> commands;
  return commands;
}

}  // namespace dispatch::bench

namespace {

void PrintUsage(FILE* out) {
  std::fprintf(out, "usage: dispatch-bench <command> [flags]\n\ncommands:\n");
  for (const auto& command : dispatch::bench::Registry()) {
    std::fprintf(out, "  %-12s %s\n", command.name.c_str(), command.summary.c_str());
  }
  std::fprintf(out, "\n`dispatch-bench <command> --help` lists a command's flags.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& command : dispatch::bench::Registry()) {
    if (command.name == argv[1]) return command.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "dispatch-bench: unknown command '%s'\n\n", argv[1]);
  PrintUsage(stderr);
  return 2;
}
