#include "bench/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace dispatch::bench {
namespace {

std::string Quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

std::string Number(double value) {
  if (!std::isfinite(value)) return "null";
  char buffer[64];
  snprintf(buffer, sizeof buffer, "%.6g", value);
  return buffer;
}

// The value of "key": in one line written by FigureJson (our own format:
// no nesting, strings without escaped quotes in keys).
std::string Field(const std::string& line, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  size_t at = line.find(needle);
  if (at == std::string::npos) return "";
  at += needle.size();
  if (at < line.size() && line[at] == '"') {
    std::string out;
    for (size_t i = at + 1; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) ++i;
      out += line[i];
    }
    return out;
  }
  size_t end = line.find_first_of(",}", at);
  return line.substr(at, end - at);
}

}  // namespace

bool Figure::met() const {
  const double x = target_on_ratio ? ratio() : value;
  if (target_on_ratio && floor <= 0) return false;
  return at_least ? x >= target : x <= target;
}

std::string FigureJson(const Figure& f) {
  std::ostringstream out;
  out << "{\"figure\":" << Quoted(f.figure) << ",\"value\":" << Number(f.value)
      << ",\"floor\":" << (f.floor > 0 ? Number(f.floor) : "null")
      << ",\"ratio\":" << (f.floor > 0 ? Number(f.ratio()) : "null")
      << ",\"target\":" << Quoted(f.target_text) << ",\"target_value\":" << Number(f.target)
      << ",\"at_least\":" << (f.at_least ? "true" : "false")
      << ",\"target_on_ratio\":" << (f.target_on_ratio ? "true" : "false")
      << ",\"met\":" << (f.met() ? "true" : "false") << ",\"runs\":" << f.runs
      << ",\"judged_min\":" << Number(f.judged_min) << ",\"judged_max\":" << Number(f.judged_max)
      << "}";
  return out.str();
}

std::string FiguresJson(const std::vector<Figure>& figures) {
  std::string out = "[\n";
  for (size_t i = 0; i < figures.size(); ++i)
    out += "  " + FigureJson(figures[i]) + (i + 1 < figures.size() ? ",\n" : "\n");
  return out + "]\n";
}

void ReportFigure(const Figure& figure) {
  const char* path = std::getenv(kSummaryEnv);
  if (path == nullptr || *path == '\0') return;
  FILE* f = fopen(path, "a");
  if (f == nullptr) return;
  fprintf(f, "%s\n", FigureJson(figure).c_str());
  fclose(f);
}

std::vector<Figure> ReadFigures(const std::string& path) {
  std::vector<Figure> figures;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    Figure f;
    f.figure = Field(line, "figure");
    if (f.figure.empty()) continue;
    f.value = std::strtod(Field(line, "value").c_str(), nullptr);
    f.floor = std::strtod(Field(line, "floor").c_str(), nullptr);  // "null" reads as 0
    f.target_text = Field(line, "target");
    f.target = std::strtod(Field(line, "target_value").c_str(), nullptr);
    f.at_least = Field(line, "at_least") == "true";
    f.target_on_ratio = Field(line, "target_on_ratio") == "true";
    const std::string runs = Field(line, "runs");  // absent in a bench's own lines
    if (!runs.empty()) {
      f.runs = std::strtoull(runs.c_str(), nullptr, 10);
      f.judged_min = std::strtod(Field(line, "judged_min").c_str(), nullptr);
      f.judged_max = std::strtod(Field(line, "judged_max").c_str(), nullptr);
    }
    figures.push_back(f);
  }
  return figures;
}

std::string FiguresMarkdown(const std::vector<Figure>& figures) {
  auto number = [](double x) {
    char text[32];
    snprintf(text, sizeof text, x >= 100 ? "%.0f" : x >= 10 ? "%.1f" : "%.2f", x);
    return std::string(text);
  };
  std::string out =
      "| figure | value | floor | ratio | target | met | runs: judged range |\n"
      "| --- | --- | --- | --- | --- | --- | --- |\n";
  for (const Figure& f : figures) {
    std::string target = f.target_text;
    for (size_t at = 0; (at = target.find('|', at)) != std::string::npos; at += 2) {
      target.replace(at, 1, "\\|");  // a bar would end the cell
    }
    out += "| " + f.figure + " | " + number(f.value) + " | " +
           (f.floor > 0 ? number(f.floor) : "-") + " | " +
           (f.floor > 0 ? number(f.ratio()) : "-") + " | " + target + " | " +
           (f.met() ? "yes" : "**no**") + " | " + std::to_string(f.runs) + ": " +
           number(f.judged_min) + "–" + number(f.judged_max) + " |\n";
  }
  return out;
}

std::vector<Figure> MedianFigures(const std::vector<Figure>& reported) {
  std::vector<std::vector<Figure>> runs;  // per name, in first-seen order
  for (const Figure& f : reported) {
    auto same = std::find_if(runs.begin(), runs.end(),
                             [&](const std::vector<Figure>& r) { return r[0].figure == f.figure; });
    if (same == runs.end()) {
      runs.push_back({f});
    } else {
      same->push_back(f);
    }
  }
  std::vector<Figure> medians;
  for (std::vector<Figure>& r : runs) {
    std::sort(r.begin(), r.end(),
              [](const Figure& a, const Figure& b) { return a.judged() < b.judged(); });
    Figure median = r[(r.size() - 1) / 2];
    median.runs = r.size();
    median.judged_min = r.front().judged();
    median.judged_max = r.back().judged();
    medians.push_back(median);
  }
  return medians;
}

}  // namespace dispatch::bench
