// DatasetDefinition text: how the reference worker's dataset kinds are named
// in a dataset's definition bytes. The first line is the kind and its
// key=value arguments ("range count=1000 splits=10"); the lines after it are
// file names ("lines" datasets). Parsing never trusts the bytes: a bad one is
// an InvalidArgument naming what is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "clients/dataset_client.h"
#include "common/status.h"

namespace dispatch::clients {

struct KindDefinition {
  std::string kind;
  std::map<std::string, std::string> args;
  std::vector<std::string> files;

  // The unsigned argument `key`, `fallback` when absent; InvalidArgument when
  // it is not an integer in [min, max].
  Result<uint64_t> Uint(const std::string& key, uint64_t fallback, uint64_t min,
                        uint64_t max) const;
};

Result<KindDefinition> ParseKindDefinition(std::string_view bytes);
// The inverse of ParseKindDefinition (arguments in key order).
std::string FormatKindDefinition(const KindDefinition& definition);

// A registrable dataset for a built-in kind: the definition bytes plus the
// split source DYNAMIC jobs need (indexed `splits` for range and synthetic,
// one explicit split per file for lines). Validates the arguments.
Result<DatasetSpec> BuiltinDatasetSpec(const KindDefinition& definition);

}  // namespace dispatch::clients
