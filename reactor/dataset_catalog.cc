#include "reactor/dataset_catalog.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>

#include "state/codec.h"

namespace dispatch::reactor {
namespace {

inline uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

}  // namespace

uint64_t FingerprintOf(std::string_view bytes) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ (bytes.size() * 0x100000001b3ULL);
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    h = (h ^ Mix(word)) * 0x100000001b3ULL + 0x632be59bd9b4e019ULL;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
  h = (h ^ Mix(tail ^ 0xa0761d6478bd642fULL)) * 0x100000001b3ULL;
  return Mix(h);
}

std::string DefinitionKey(uint64_t dataset_id, uint64_t fingerprint) {
  return "dataset_" + std::to_string(dataset_id) + "_fp_" + std::to_string(fingerprint);
}

std::string EncodeDatasetMetadata(rpc::SplitSource::Reader split_source,
                                  capnp::Data::Reader user_metadata) {
  capnp::MallocMessageBuilder message;
  auto metadata = message.initRoot<rpc::DatasetMetadata>();
  metadata.setSplitSource(split_source);
  metadata.setUserMetadata(user_metadata);
  return state::EncodeMessage(message);
}

Status WithDatasetMetadata(const std::string& bytes,
                           const std::function<void(rpc::DatasetMetadata::Reader)>& use) {
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0) {
    return DataLossError("dataset metadata of " + std::to_string(bytes.size()) +
                         " bytes is not a message");
  }
  // Aligned copy: the state keeps the bytes in a std::string.
  auto words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  Status status;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() {
                 capnp::ReaderOptions options;
                 options.traversalLimitInWords = words.size() * 2 + 64;
                 capnp::FlatArrayMessageReader reader(words, options);
                 use(reader.getRoot<rpc::DatasetMetadata>());
               })) {
    status = DataLossError(std::string("dataset metadata does not decode: ") +
                           e->getDescription().cStr());
  }
  return status;
}

Result<const SplitSourceInfo*> DatasetCatalog::SplitSource(uint64_t dataset_id) {
  auto it = cache_.find(dataset_id);
  if (it != cache_.end()) return &it->second;
  auto dataset = state_.GetDataset(dataset_id);
  if (!dataset.ok()) return dataset.status();
  SplitSourceInfo info;
  Status status =
      WithDatasetMetadata((*dataset)->metadata, [&info](rpc::DatasetMetadata::Reader metadata) {
        auto source = metadata.getSplitSource();
        switch (source.which()) {
          case rpc::SplitSource::NONE:
            break;
          case rpc::SplitSource::INDEXED:
            info.kind = SplitSourceInfo::Kind::kIndexed;
            info.num_splits = source.getIndexed();
            break;
          case rpc::SplitSource::EXPLICIT: {
            info.kind = SplitSourceInfo::Kind::kExplicit;
            auto list = source.getExplicit();
            info.num_splits = list.size();
            info.payloads.reserve(list.size());
            for (auto payload : list) {
              info.payloads.emplace_back(reinterpret_cast<const char*>(payload.begin()),
                                         payload.size());
            }
            break;
          }
        }
      });
  if (!status.ok())
    return DataLossError("dataset " + std::to_string(dataset_id) + ": " + status.message());
  return &cache_.emplace(dataset_id, std::move(info)).first->second;
}

}  // namespace dispatch::reactor
