// Helpers for the derived indexes of DispatcherState: a multimap kept as a
// map of sets never holds an empty set, so an index rebuilt from the records
// compares equal to one maintained update by update.
#pragma once

#include <map>
#include <set>

namespace dispatch::state {

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
