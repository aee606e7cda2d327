// Helpers for the derived indexes of DispatcherState: a multimap kept as a
// map of sets never holds an empty set, so an index rebuilt from the records
// compares equal to one maintained update by update.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
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

// A small set of ids held as a sorted vector, for sets refilled and emptied
// over and over (closures awaiting release): ids mostly arrive in increasing
// order, so an insert appends, a lookup is a binary search, and emptying is
// O(1) where a hashed set clears its whole bucket array, sized by the most it
// ever held, and frees a node per id.
class SortedIdSet {
 public:
  SortedIdSet() = default;
  SortedIdSet(std::initializer_list<uint64_t> ids) { Insert(ids.begin(), ids.end()); }

  bool contains(uint64_t id) const { return std::binary_search(ids_.begin(), ids_.end(), id); }
  size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.empty(); }
  void clear() { ids_.clear(); }
  std::vector<uint64_t>::const_iterator begin() const { return ids_.begin(); }
  std::vector<uint64_t>::const_iterator end() const { return ids_.end(); }

  // Adds [first, last); ids already held are kept once.
  template <typename It>
  void Insert(It first, It last) {
    const size_t old = ids_.size();
    ids_.insert(ids_.end(), first, last);
    if (ids_.size() == old) return;
    const auto added = ids_.begin() + static_cast<std::ptrdiff_t>(old);
    if (!std::is_sorted(added, ids_.end())) std::sort(added, ids_.end());
    auto from = old == 0 ? ids_.begin() : added - 1;
    if (*from > *added) {  // the new ids interleave with the old: merge
      std::inplace_merge(ids_.begin(), added, ids_.end());
      from = ids_.begin();
    }
    ids_.erase(std::unique(from, ids_.end()), ids_.end());
  }

 private:
  std::vector<uint64_t> ids_;  // sorted, distinct
};

inline std::vector<uint64_t> SortedIds(const IdSet& ids) {
  std::vector<uint64_t> out(ids.begin(), ids.end());
  std::sort(out.begin(), out.end());
  return out;
}

// For a map of counts that never holds a zero (so a rebuilt one compares equal).
template <typename Map, typename Key>
void CountUp(Map& counts, const Key& key) {
  ++counts[key];
}

template <typename Map, typename Key>
void CountDown(Map& counts, const Key& key) {
  auto it = counts.find(key);
  if (it != counts.end() && --it->second == 0) counts.erase(it);
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
