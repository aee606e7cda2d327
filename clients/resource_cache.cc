#include "clients/resource_cache.h"

namespace dispatch::clients {

bool ResourceCache::AddSpec(uint64_t resource_id, Spec spec) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& entry = entries_[resource_id];
  if (entry.has_spec) return false;
  entry.spec = std::move(spec);
  entry.has_spec = true;
  return true;
}

Result<std::string> ResourceCache::Get(uint64_t resource_id, const Builder& build) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = entries_.find(resource_id);
  if (it == entries_.end() || !it->second.has_spec) {
    return NotFoundError("per-worker resource " + std::to_string(resource_id) +
                         " is unknown on this worker (the dispatcher sent no spec for it)");
  }
  Entry& entry = it->second;  // std::map: stable while other ids are added
  built_cv_.wait(lock, [&] { return !entry.building; });
  if (entry.built) return entry.component;
  entry.building = true;
  Spec spec = entry.spec;
  lock.unlock();
  Result<std::string> built = build(resource_id, spec);
  lock.lock();
  entry.building = false;
  if (built.ok()) {
    entry.built = true;
    entry.component = *built;
    ++builds_;
  }
  built_cv_.notify_all();
  return built;
}

bool ResourceCache::IsBuilt(uint64_t resource_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(resource_id);
  return it != entries_.end() && it->second.built;
}

uint64_t ResourceCache::builds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return builds_;
}

}  // namespace dispatch::clients
