// Helpers for the derived indexes of DispatcherState: a multimap kept as a
// map of sets never holds an empty set, so an index rebuilt from the records
// compares equal to one maintained update by update.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <unordered_set>
#include <utility>
#include <vector>

namespace dispatch::state {

// The ids of one key of a hot index (closures by worker, by coordinator):
// hashed, because every closure enters and leaves them, and a tree's node
// walk and rebalancing cost more than the rare ordered walks, which sort.
using IdSet = std::unordered_set<uint64_t>;

// For hashed indexes keyed by two ids, e.g. (coordinator, request id).
struct IdPairHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& ids) const {
    // Mixes the first id before combining, so (a, b) and (b, a) differ.
    return std::hash<uint64_t>()(ids.first * 0x9E3779B97F4A7C15ull ^ ids.second);
  }
};

// The smallest id (or pair of ids) that `ids` holds more than once, if any.
// Sorting a copy (often sorted already) costs less than a tree or hash of ids
// that are almost never repeated.
template <typename Id>
std::optional<Id> RepeatedId(std::vector<Id> ids) {
  if (!std::is_sorted(ids.begin(), ids.end())) std::sort(ids.begin(), ids.end());
  auto twice = std::adjacent_find(ids.begin(), ids.end());
  if (twice == ids.end()) return std::nullopt;
  return *twice;
}

inline std::vector<uint64_t> SortedIds(const IdSet& ids) {
  std::vector<uint64_t> out(ids.begin(), ids.end());
  std::sort(out.begin(), out.end());
  return out;
}

template <typename Map, typename Key, typename Value>
void AddToIndex(Map& index, const Key& key, const Value& value) {
  auto it = index.find(key);
  if (it == index.end()) it = index.emplace(key, typename Map::mapped_type()).first;
  it->second.insert(value);
}

template <typename Map, typename Key, typename Value>
void RemoveFromIndex(Map& index, const Key& key, const Value& value) {
  auto it = index.find(key);
  if (it == index.end()) return;
  it->second.erase(value);
  if (it->second.empty()) index.erase(it);
}

}  // namespace dispatch::state
