// `dispatch-bench all`: every benchmark in sequence, each in a child process
// of this binary with short settings, the whole sequence --repeat times
// (issue 19 judges each target on the median of three runs), then one
// summary of the figures they report (bench/summary.h): per figure the run
// whose judged figure is the median: value, floor, ratio, target, met.
// `--json=PATH` writes the summary as a JSON array ("-": stdout), to compare
// a run with an earlier one; `dispatch-bench table --json=PATH` renders such
// a file as the Markdown benchmark table (docs/contributors/benchmarks.md).
// Benchmarks report, never assert: the
// exit code is 0 unless a bench could not run.
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench/registry.h"
#include "bench/summary.h"
#include "common/flag_parser.h"

extern char** environ;

namespace dispatch::bench {
namespace {

struct Step {
  std::string name;  // shown in the progress lines and --only
  std::vector<std::string> argv;  // the command and its short settings
};

// Short settings: each step takes well under a minute on 2 busy cores.
std::vector<Step> Steps() {
  return {
      {"closures", {"closures", "--closures=20000", "--sequential=1000", "--warmup=100"}},
      {"closures-normal",
       {"closures", "--synchronous=normal", "--closures=20000", "--sequential=1000",
        "--warmup=100"}},
      // The bench's own 2 GiB a run after a warm-up run: 512 MiB runs lasted
      // 150 ms, and the job's start, its tail and the VM's stalls decided them.
      {"read", {"read", "--runs=3"}},
      {"dataservice", {"dataservice", "--quick"}},
      {"ping", {"ping", "--runs=3", "--sequential=2000", "--pipelined=20000"}},
      {"results", {"results", "--closures=2000"}},
      {"journal", {"journal", "--seconds=1", "--runs=1", "--startup_records=20000"}},
      {"snapshot", {"snapshot", "--seconds=2"}},
      {"startup", {"startup", "--updates=20000", "--runs=1"}},
  };
}

// Runs this binary with `argv`; its exit status (-1 when it could not start).
int RunChild(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  std::string self = "/proc/self/exe";
  args.push_back(self.data());
  std::vector<std::string> copy = argv;
  for (std::string& arg : copy) args.push_back(arg.data());
  args.push_back(nullptr);
  fflush(stdout);
  pid_t pid;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, args.data(), environ) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int RunAll(int argc, char** argv) {
  std::string json;
  std::string only;
  uint64_t repeat = 3;
  FlagParser parser("dispatch-bench all",
                    "Every benchmark in sequence with short settings, then a summary of their "
                    "figures against their floors and targets.");
  parser.AddString("json", "PATH", "also write the summary as JSON there (-: stdout)", &json);
  parser.AddString("only", "LIST",
                   "comma-separated steps to run (closures, closures-normal, read, dataservice, "
                   "ping, results, journal, snapshot, startup); empty: all",
                   &only);
  parser.AddUint("repeat",
                 "runs of the whole sequence; each figure is judged on the run whose "
                 "figure is the median",
                 &repeat, 1, 100);
  ParseFlagsOrExit(parser, argc, argv);

  char path_template[] = "/tmp/dispatch-bench-summary-XXXXXX";
  int fd = mkstemp(path_template);
  if (fd < 0) {
    fprintf(stderr, "dispatch-bench all: cannot create the summary file\n");
    return 1;
  }
  close(fd);
  const std::string summary_path = path_template;
  setenv(kSummaryEnv, summary_path.c_str(), 1);

  int failures = 0;
  // Whole sequences, not one step three times in a row: the machine drifts
  // over minutes, and each step's runs should see more than one minute.
  for (uint64_t run = 1; run <= repeat; ++run) {
    for (const Step& step : Steps()) {
      if (!only.empty() && ("," + only + ",").find("," + step.name + ",") == std::string::npos)
        continue;
      std::string line;
      for (const std::string& arg : step.argv) line += " " + arg;
      printf("\n==== %s (run %llu of %llu): dispatch-bench%s\n", step.name.c_str(),
             static_cast<unsigned long long>(run), static_cast<unsigned long long>(repeat),
             line.c_str());
      const int status = RunChild(step.argv);
      if (status != 0) {
        ++failures;
        printf("==== %s exited with %d\n", step.name.c_str(), status);
      }
    }
  }

  std::vector<Figure> figures = MedianFigures(ReadFigures(summary_path));
  unlink(summary_path.c_str());
  printf("\n==== summary (%zu figures; each the run whose judged figure, the ratio where the "
         "target is on it, is the median)\n",
         figures.size());
  printf("%-62s %12s %12s %8s  %-32s %-4s %s\n", "figure", "value", "floor", "ratio", "target",
         "met", "runs: judged range");
  for (const Figure& f : figures) {
    char floor[32] = "-";
    char ratio[32] = "-";
    if (f.floor > 0) {
      snprintf(floor, sizeof floor, "%.1f", f.floor);
      snprintf(ratio, sizeof ratio, "%.2f", f.ratio());
    }
    printf("%-62s %12.1f %12s %8s  %-32s %-4s %zu: %.4g-%.4g\n", f.figure.c_str(), f.value, floor,
           ratio, f.target_text.c_str(), f.met() ? "yes" : "NO", f.runs, f.judged_min,
           f.judged_max);
  }
  if (!json.empty()) {
    const std::string out = FiguresJson(figures);
    if (json == "-") {
      fputs(out.c_str(), stdout);
    } else {
      std::ofstream file(json);
      file << out;
      if (!file) {
        fprintf(stderr, "dispatch-bench all: cannot write %s\n", json.c_str());
        return 1;
      }
    }
  }
  return failures == 0 ? 0 : 1;
}

DISPATCH_BENCH("all", "every bench in sequence with short settings, then a --json summary",
               RunAll);

int RunTable(int argc, char** argv) {
  std::string json;
  FlagParser parser("dispatch-bench table",
                    "Prints the summary `dispatch-bench all --json` wrote as a Markdown table "
                    "(the README's benchmark table).");
  parser.AddString("json", "PATH", "the file `all --json=PATH` wrote", &json);
  ParseFlagsOrExit(parser, argc, argv);
  std::vector<Figure> figures = ReadFigures(json);
  if (figures.empty()) {
    fprintf(stderr, "dispatch-bench table: no figures in %s\n", json.c_str());
    return 1;
  }
  fputs(FiguresMarkdown(figures).c_str(), stdout);
  return 0;
}

DISPATCH_BENCH("table", "the summary `all --json` wrote, as the README's Markdown table",
               RunTable);

}  // namespace
}  // namespace dispatch::bench
