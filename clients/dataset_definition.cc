#include "clients/dataset_definition.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace dispatch::clients {

Result<uint64_t> KindDefinition::Uint(const std::string& key, uint64_t fallback, uint64_t min,
                                      uint64_t max) const {
  auto it = args.find(key);
  if (it == args.end()) return fallback;
  const std::string& text = it->second;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] == '-' || *end != '\0' || errno != 0 || v < min || v > max) {
    return InvalidArgumentError(kind + " dataset: " + key + " must be an integer in [" +
                                std::to_string(min) + ", " + std::to_string(max) + "], got '" +
                                text + "'");
  }
  return static_cast<uint64_t>(v);
}

Result<KindDefinition> ParseKindDefinition(std::string_view bytes) {
  KindDefinition out;
  size_t newline = bytes.find('\n');
  std::string head(bytes.substr(0, newline));
  std::istringstream words(head);
  std::string word;
  if (!(words >> out.kind)) return InvalidArgumentError("the dataset definition names no kind");
  while (words >> word) {
    size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgumentError(out.kind + " dataset: argument '" + word + "' is not key=value");
    }
    if (!out.args.emplace(word.substr(0, eq), word.substr(eq + 1)).second) {
      return InvalidArgumentError(out.kind + " dataset: argument " + word.substr(0, eq) +
                                  " is given twice");
    }
  }
  if (newline != std::string_view::npos) {
    std::string rest(bytes.substr(newline + 1));
    std::istringstream lines(rest);
    std::string line;
    while (std::getline(lines, line)) {
      if (!line.empty()) out.files.push_back(line);
    }
  }
  return out;
}

std::string FormatKindDefinition(const KindDefinition& definition) {
  std::string out = definition.kind;
  for (const auto& [key, value] : definition.args) out += " " + key + "=" + value;
  out += "\n";
  for (const std::string& file : definition.files) out += file + "\n";
  return out;
}

Result<DatasetSpec> BuiltinDatasetSpec(const KindDefinition& definition) {
  DatasetSpec spec;
  const std::string& kind = definition.kind;
  if (kind == "range" || kind == "synthetic") {
    Result<uint64_t> count = definition.Uint("count", 0, 0, uint64_t{1} << 48);
    if (!count.ok()) return count.status();
    if (!definition.args.contains("count"))
      return InvalidArgumentError(kind + " dataset: count=N is required");
    // At most 2^20 splits: a worker opens a shard by listing its splits, so
    // "splits=4294967296" made every worker allocate ~4 billion split items
    // (found by the dataset definition fuzz target: a 36-million-split range
    // took longer than its 10 s bound).
    Result<uint64_t> splits = definition.Uint("splits", 1, 1, uint64_t{1} << 20);
    if (!splits.ok()) return splits.status();
    if (kind == "synthetic") {
      Result<uint64_t> size = definition.Uint("size", 100, 0, uint64_t{64} << 20);
      if (!size.ok()) return size.status();
    }
    for (const auto& [key, value] : definition.args) {
      if (key != "count" && key != "splits" && !(kind == "synthetic" && key == "size")) {
        return InvalidArgumentError(kind + " dataset: unknown argument " + key);
      }
    }
    if (!definition.files.empty()) return InvalidArgumentError(kind + " dataset takes no files");
    spec.num_splits = *splits;
  } else if (kind == "lines") {
    if (!definition.args.empty()) {
      return InvalidArgumentError("lines dataset: unknown argument " +
                                  definition.args.begin()->first);
    }
    if (definition.files.empty()) return InvalidArgumentError("lines dataset: no files given");
    spec.explicit_splits = definition.files;
  } else {
    return InvalidArgumentError("unknown dataset kind '" + kind +
                                "' (built-in kinds: range, lines, synthetic)");
  }
  spec.definition = FormatKindDefinition(definition);
  return spec;
}

}  // namespace dispatch::clients
