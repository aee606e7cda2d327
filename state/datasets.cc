// Datasets: registration (deduplicated by fingerprint by the reactor; the
// state refuses a second dataset with the same fingerprint), element specs and
// the dataset queries.

#include <cstdint>
#include <string>

#include "state/bytes.h"
#include "state/dispatcher_state.h"

namespace dispatch::state {

namespace {
std::string DatasetName(uint64_t id) { return "dataset " + std::to_string(id); }
}  // namespace

Status DispatcherState::CheckRegisterDataset(journal::RegisterDataset::Reader u) const {
  const uint64_t id = u.getDatasetId();
  if (id == 0) return InvalidArgumentError("dataset id 0 is reserved");
  // The next id after the largest would wrap to 0 (found by the journal fuzz target).
  if (id == UINT64_MAX) {
    return InvalidArgumentError("dataset id " + std::to_string(id) +
                                " is the largest: the next dataset id would wrap to 0");
  }
  if (datasets_.contains(id)) return AlreadyExistsError(DatasetName(id) + " already exists");
  if (id < next_dataset_id_) {
    return InvalidArgumentError(DatasetName(id) + " reuses an id below the next dataset id " +
                                std::to_string(next_dataset_id_));
  }
  auto by_fp = indexes_.dataset_by_fingerprint.find(u.getFingerprint());
  if (by_fp != indexes_.dataset_by_fingerprint.end()) {
    return AlreadyExistsError("fingerprint " + std::to_string(u.getFingerprint()) +
                              " is already registered as " + DatasetName(by_fp->second));
  }
  if (u.getDefinitionKey().size() == 0) {
    return InvalidArgumentError(DatasetName(id) + " has an empty definition key");
  }
  auto by_key = indexes_.dataset_by_definition_key.find(ToView(u.getDefinitionKey()));
  if (by_key != indexes_.dataset_by_definition_key.end()) {
    return AlreadyExistsError("definition key '" + ToString(u.getDefinitionKey()) +
                              "' already belongs to " + DatasetName(by_key->second));
  }
  return Status::Ok();
}

void DispatcherState::ApplyRegisterDataset(journal::RegisterDataset::Reader u, int64_t now) {
  Dataset dataset;
  dataset.id = u.getDatasetId();
  dataset.fingerprint = u.getFingerprint();
  dataset.metadata = ToString(u.getMetadata());
  dataset.definition_key = ToString(u.getDefinitionKey());
  dataset.registered_micros = now;
  dataset.kind = ToString(u.getKind());
  indexes_.dataset_by_fingerprint.emplace(dataset.fingerprint, dataset.id);
  indexes_.dataset_by_definition_key.emplace(dataset.definition_key, dataset.id);
  next_dataset_id_ = dataset.id + 1;
  datasets_.emplace(dataset.id, std::move(dataset));
}

Status DispatcherState::CheckSetElementSpec(journal::SetElementSpec::Reader u) const {
  const Dataset* dataset = FindDataset(u.getDatasetId());
  if (dataset == nullptr) return NotFoundError(DatasetName(u.getDatasetId()) + " is unknown");
  if (dataset->element_spec.has_value()) {
    return AlreadyExistsError(DatasetName(dataset->id) + " already has an element spec");
  }
  if (u.getElementSpec().size() == 0) {
    return InvalidArgumentError("the element spec for " + DatasetName(dataset->id) + " is empty");
  }
  return Status::Ok();
}

void DispatcherState::ApplySetElementSpec(journal::SetElementSpec::Reader u) {
  datasets_.at(u.getDatasetId()).element_spec = ToString(u.getElementSpec());
}

const Dataset* DispatcherState::FindDataset(uint64_t dataset_id) const {
  auto it = datasets_.find(dataset_id);
  return it == datasets_.end() ? nullptr : &it->second;
}

const Dataset* DispatcherState::FindDatasetByFingerprint(uint64_t fingerprint) const {
  auto it = indexes_.dataset_by_fingerprint.find(fingerprint);
  return it == indexes_.dataset_by_fingerprint.end() ? nullptr : FindDataset(it->second);
}

Result<const Dataset*> DispatcherState::GetDataset(uint64_t dataset_id) const {
  const Dataset* dataset = FindDataset(dataset_id);
  if (dataset == nullptr) return NotFoundError(DatasetName(dataset_id) + " is unknown");
  return dataset;
}

std::vector<const Dataset*> DispatcherState::ListDatasets() const {
  std::vector<const Dataset*> out;
  out.reserve(datasets_.size());
  for (const auto& [id, dataset] : datasets_) out.push_back(&dataset);
  return out;
}

}  // namespace dispatch::state
