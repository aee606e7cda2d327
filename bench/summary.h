// Figures a benchmark reports for `dispatch-bench all`'s summary: each one
// with the floor it is judged against (what the hardware costs for the same
// work, measured in the same run) and its target. A bench calls
// ReportFigure() for each; when the environment variable
// DISPATCH_BENCH_SUMMARY names a file (set by `all` for its children), the
// figure is appended to it as one JSON object per line, else it is dropped.
#pragma once

#include <string>
#include <vector>

namespace dispatch::bench {

struct Figure {
  std::string figure;    // "closures sequential round trip p50 (us), FULL"
  double value = 0;
  double floor = 0;      // 0: none (then ratio is 0 too)
  // The target: `value` (or value / floor when target_on_ratio) at most
  // (at_least false) or at least (true) `target`.
  double target = 0;
  bool at_least = false;
  bool target_on_ratio = false;
  std::string target_text;  // as the issue puts it: "<= commit + 4 idle hops + 40 us"

  double ratio() const { return floor > 0 ? value / floor : 0; }
  // What the target judges: ratio() when target_on_ratio, else value.
  double judged() const { return target_on_ratio ? ratio() : value; }
  bool met() const;
  // Set by MedianFigures: how many runs reported this figure, and the
  // least and greatest judged() among them.
  size_t runs = 1;
  double judged_min = 0;
  double judged_max = 0;
};

inline constexpr const char* kSummaryEnv = "DISPATCH_BENCH_SUMMARY";

void ReportFigure(const Figure& figure);
// One JSON object: figure, value, floor, ratio, target, met.
std::string FigureJson(const Figure& figure);
// A JSON array of them, one figure a line (what `all --json` writes, and
// ReadFigures reads back).
std::string FiguresJson(const std::vector<Figure>& figures);
// Reads the figures a file of ReportFigure() lines holds (lines that do not
// parse are skipped), or the JSON array `all --json` writes (one figure a
// line, with its runs and judged range).
std::vector<Figure> ReadFigures(const std::string& path);
// The figures as the Markdown benchmark table (docs/contributors/benchmarks.md):
// figure, value, floor, ratio,
// target, met, runs and the judged range.
std::string FiguresMarkdown(const std::vector<Figure>& figures);
// One figure per name, in the order names first appear: of the runs that
// reported it, the one whose judged() is the median (the lower middle one
// for an even count), whole, so its value, floor and ratio stay of one run.
std::vector<Figure> MedianFigures(const std::vector<Figure>& reported);

}  // namespace dispatch::bench
