// DispatcherService: datasets. A definition is registered once: its
// fingerprint finds a candidate, the stored bytes confirm it byte for byte
// (on a collision the next fingerprint value is probed). The definition goes
// to the dataset store in the same transaction as its RegisterDataset; the
// split source and the caller's metadata travel inside the journaled metadata.

#include <string>

#include "reactor/data_service.h"
#include "reactor/dataset_catalog.h"
#include "reactor/service_util.h"
#include "reactor/services.h"
#include "state/task_routing.h"

namespace dispatch::reactor {
namespace {

// Room for the rest of a RegisterDataset record around its metadata.
constexpr size_t kRecordOverheadBytes = 4096;

Status CheckSplitSource(rpc::SplitSource::Reader source) {
  switch (source.which()) {
    case rpc::SplitSource::NONE:
    case rpc::SplitSource::INDEXED:
      return Status::Ok();
    case rpc::SplitSource::EXPLICIT:
      if (source.getExplicit().size() == 0) {
        return InvalidArgumentError("an explicit split source needs at least one split payload");
      }
      return Status::Ok();
  }
  return InvalidArgumentError("the split source is of a kind this dispatcher does not know");
}

std::string DescribeSplitSource(rpc::SplitSource::Reader source) {
  switch (source.which()) {
    case rpc::SplitSource::NONE:
      return "no split source";
    case rpc::SplitSource::INDEXED:
      return "an indexed split source of " + std::to_string(source.getIndexed()) + " splits";
    case rpc::SplitSource::EXPLICIT:
      return "an explicit split source of " + std::to_string(source.getExplicit().size()) +
             " splits";
  }
  return "a split source of an unknown kind";
}

bool SameSplitSource(rpc::SplitSource::Reader a, rpc::SplitSource::Reader b) {
  if (a.which() != b.which()) return false;
  switch (a.which()) {
    case rpc::SplitSource::NONE:
      return true;
    case rpc::SplitSource::INDEXED:
      return a.getIndexed() == b.getIndexed();
    case rpc::SplitSource::EXPLICIT: {
      auto x = a.getExplicit();
      auto y = b.getExplicit();
      if (x.size() != y.size()) return false;
      for (unsigned i = 0; i < x.size(); ++i) {
        if (x[i] != y[i]) return false;
      }
      return true;
    }
  }
  return false;
}

// FailedPrecondition naming both when a definition already registered comes
// with another split source or metadata: keeping the old ones silently would
// hand out splits the caller did not ask for.
Status CheckSameRegistration(const state::Dataset& existing, rpc::SplitSource::Reader source,
                             capnp::Data::Reader metadata) {
  Status verdict = Status::Ok();
  Status decoded = WithDatasetMetadata(existing.metadata, [&](rpc::DatasetMetadata::Reader kept) {
    const std::string name = "dataset " + std::to_string(existing.id);
    if (!SameSplitSource(kept.getSplitSource(), source)) {
      verdict = FailedPreconditionError(
          name + " has this definition with " + DescribeSplitSource(kept.getSplitSource()) +
          "; it cannot be registered again with " + DescribeSplitSource(source) +
          " (change the definition to register another dataset)");
    } else if (kept.getUserMetadata() != metadata) {
      verdict = FailedPreconditionError(
          name + " has this definition with " + std::to_string(kept.getUserMetadata().size()) +
          " bytes of metadata; it cannot be registered again with other metadata (" +
          std::to_string(metadata.size()) +
          " bytes; change the definition to register another dataset)");
    }
  });
  return decoded.ok() ? verdict : decoded;
}

}  // namespace

kj::Promise<void> DispatcherService::getOrRegisterDataset(GetOrRegisterDatasetContext context) {
  DataService& data = this->data();
  DurableState& durable = data.durable();
  const auto& state = data.state();
  auto params = context.getParams();
  const std::string definition(View(params.getDefinition()));
  if (definition.empty())
    ThrowStatus(InvalidArgumentError("a dataset definition must not be empty"));
  const size_t max_definition = durable.store().options().max_dataset_bytes;
  if (definition.size() > max_definition) {
    ThrowStatus(ResourceExhaustedError(
        "a dataset definition of " + std::to_string(definition.size()) +
        " bytes is larger than the limit of " + std::to_string(max_definition)));
  }
  const capnp::Data::Reader element_spec = params.getElementSpec();
  // Checked before anything is registered, so that a refused element spec
  // leaves no dataset behind (Submit would refuse the record anyway).
  const size_t max_record = durable.pipeline().max_record_bytes();
  if (element_spec.size() + kRecordOverheadBytes > max_record) {
    ThrowStatus(ResourceExhaustedError("an element spec of " + std::to_string(element_spec.size()) +
                                       " bytes is more than a journal record may hold (" +
                                       std::to_string(max_record - kRecordOverheadBytes) + ")"));
  }

  // Find the dataset with these exact bytes, or the first free fingerprint.
  uint64_t fingerprint = FingerprintOf(definition);
  const state::Dataset* existing = nullptr;
  while (const state::Dataset* candidate = state.FindDatasetByFingerprint(fingerprint)) {
    std::string stored = ValueOrThrow(durable.datasets().Get(candidate->definition_key));
    if (stored == definition) {
      existing = candidate;
      break;
    }
    ++fingerprint;
  }

  uint64_t dataset_id;
  bool has_spec;
  if (existing != nullptr) {
    ThrowIfError(CheckSameRegistration(*existing, params.getSplitSource(), params.getMetadata()));
    dataset_id = existing->id;
    has_spec = existing->element_spec.has_value();
  } else {
    ThrowIfError(CheckSplitSource(params.getSplitSource()));
    std::string metadata = EncodeDatasetMetadata(params.getSplitSource(), params.getMetadata());
    // Jobs of the dataset get tasks only on workers producing its kind.
    const std::string kind =
        state::DatasetKindOfDefinition(definition, data.options().max_name_bytes);
    if (metadata.size() + kind.size() + kRecordOverheadBytes > max_record) {
      ThrowStatus(ResourceExhaustedError("the split source and metadata take " +
                                         std::to_string(metadata.size()) +
                                         " bytes, more than a journal record may hold (" +
                                         std::to_string(max_record - kRecordOverheadBytes) + ")"));
    }
    dataset_id = state.NextDatasetId();
    const std::string key = DefinitionKey(dataset_id, fingerprint);
    // The definition joins the batch right after its record: room for both.
    ThrowIfError(durable.pipeline().MakeRoom(definition.size() + metadata.size() + kind.size() +
                                  kRecordOverheadBytes));
    ThrowIfError(data.Submit([&](journal::Update::Builder update) {
      auto reg = update.initRegisterDataset();
      reg.setDatasetId(dataset_id);
      reg.setFingerprint(fingerprint);
      reg.setMetadata(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(metadata.data()),
                                          metadata.size()));
      reg.setDefinitionKey(key);
      reg.setKind(kind);
    }));
    // Right after its record, so that both share one transaction (an early
    // commit happens only inside Submit) and a refused record stores nothing.
    durable.datasets().Put(key, definition);
    has_spec = false;
  }
  if (!has_spec && element_spec.size() > 0) {
    ThrowIfError(data.Submit([&](journal::Update::Builder update) {
      auto set = update.initSetElementSpec();
      set.setDatasetId(dataset_id);
      set.setElementSpec(element_spec);
    }));
  }
  auto results = context.getResults();
  results.setDatasetId(dataset_id);
  results.setIncarnation(data.incarnation());
  return durable.pipeline().Barrier();
}

kj::Promise<void> DispatcherService::getDatasetDef(GetDatasetDefContext context) {
  DataService& data = this->data();
  const state::Dataset* dataset =
      ValueOrThrow(data.state().GetDataset(context.getParams().getDatasetId()));
  std::string definition = ValueOrThrow(data.durable().datasets().Get(dataset->definition_key));
  auto results = context.getResults();
  results.setDefinition(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(definition.data()),
                                            definition.size()));
  ThrowIfError(
      WithDatasetMetadata(dataset->metadata, [&results](rpc::DatasetMetadata::Reader metadata) {
        results.setSplitSource(metadata.getSplitSource());
        results.setMetadata(metadata.getUserMetadata());
      }));
  results.setIncarnation(data.incarnation());
  return data.durable().pipeline().Barrier();
}

kj::Promise<void> DispatcherService::getElementSpec(GetElementSpecContext context) {
  DataService& data = this->data();
  const uint64_t dataset_id = context.getParams().getDatasetId();
  const state::Dataset* dataset = ValueOrThrow(data.state().GetDataset(dataset_id));
  if (!dataset->element_spec.has_value()) {
    ThrowStatus(FailedPreconditionError("dataset " + std::to_string(dataset_id) +
                                        " has no element spec: it was registered without one"));
  }
  auto results = context.getResults();
  const std::string& spec = *dataset->element_spec;
  results.setElementSpec(
      capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(spec.data()), spec.size()));
  results.setIncarnation(data.incarnation());
  return data.durable().pipeline().Barrier();
}

}  // namespace dispatch::reactor
