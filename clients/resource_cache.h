// ResourceCache: this worker process's components of per-worker resources.
// The dispatcher sends a resource's spec (function, args) when it is created
// or this worker connects (the worker then builds it at once), and again with
// the closures that use it; whichever comes first builds the component, once
// per process, and later closures reuse it. A failed build is not cached: the
// next closure tries again. Thread-safe: builds run on executor threads, and
// two closures needing the same component wait for one build.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "common/status.h"

namespace dispatch::clients {

class ResourceCache {
 public:
  struct Spec {
    std::string function;
    std::string args;
  };
  // Builds a component from its spec; an error message on failure.
  using Builder = std::function<Result<std::string>(uint64_t resource_id, const Spec& spec)>;

  // Records a spec (the same id always carries the same spec). True if it is
  // new to this process.
  bool AddSpec(uint64_t resource_id, Spec spec);
  // The component of `resource_id`, built now if this process has none.
  // NotFound when no spec for it has arrived; the builder's error otherwise.
  Result<std::string> Get(uint64_t resource_id, const Builder& build);
  // True when the component is built (no call would build it).
  bool IsBuilt(uint64_t resource_id) const;
  uint64_t builds() const;

 private:
  struct Entry {
    Spec spec;
    bool has_spec = false;
    bool building = false;
    bool built = false;
    std::string component;
  };

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable built_cv_;
  std::map<uint64_t, Entry> entries_;
  uint64_t builds_ = 0;
};

}  // namespace dispatch::clients
