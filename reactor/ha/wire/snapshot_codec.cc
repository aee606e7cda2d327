#include "reactor/ha/wire/snapshot_codec.h"

#include <algorithm>
#include <cstring>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include "common/checksum.h"
#include "reactor/ha/wire/pass_codec.h"

namespace dispatch::ha {
namespace {

// Cap'n Proto's largest blob (Data) is 2^29 - 1 bytes.
constexpr size_t kMaxBlobBytes = (size_t{1} << 29) - 1;

void PutCrc(std::string& out, uint32_t crc) {
  for (int b = 0; b < 4; ++b) out[b] = static_cast<char>((crc >> (8 * b)) & 0xff);
}

uint32_t GetCrc(std::string_view value) {
  uint32_t crc = 0;
  for (int b = 0; b < 4; ++b) crc |= static_cast<uint32_t>(static_cast<unsigned char>(value[b])) << (8 * b);
  return crc;
}

}  // namespace

std::string SnapshotPrefix(const std::string& prefix) { return prefix + "/snapshot/"; }

std::string SnapshotChunkPrefix(const std::string& prefix, uint64_t seq) {
  return SnapshotPrefix(prefix) + KeyDigits(seq) + "/";
}

std::string SnapshotChunkKey(const std::string& prefix, uint64_t seq, uint64_t chunk) {
  return SnapshotChunkPrefix(prefix, seq) + KeyDigits(chunk);
}

std::string SnapshotCurrentKey(const std::string& prefix) { return SnapshotPrefix(prefix) + "current"; }

std::string EncodeSnapshotDescriptor(const SnapshotDescriptor& descriptor) {
  capnp::MallocMessageBuilder message;
  auto d = message.initRoot<wire::SnapshotDescriptor>();
  d.setSeq(descriptor.seq);
  d.setChunks(descriptor.chunks);
  d.setBytes(descriptor.bytes);
  d.setCrc32c(descriptor.crc32c);
  d.setChunkBytes(descriptor.chunk_bytes);
  return FrameMessage(message);
}

Result<SnapshotDescriptor> DecodeSnapshotDescriptor(std::string_view value, const std::string& key) {
  auto words = UnframeMessage(value, "etcd snapshot descriptor " + key);
  if (!words.ok()) return words.status();
  SnapshotDescriptor out;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() {
                 capnp::FlatArrayMessageReader reader(*words);
                 auto d = reader.getRoot<wire::SnapshotDescriptor>();
                 out.seq = d.getSeq();
                 out.chunks = d.getChunks();
                 out.bytes = d.getBytes();
                 out.crc32c = d.getCrc32c();
                 out.chunk_bytes = d.getChunkBytes();
               })) {
    return DataLossError("etcd snapshot descriptor " + key + " does not decode: " + e->getDescription().cStr());
  }
  const bool sizes_agree = out.chunk_bytes > 0 && out.chunk_bytes <= kSnapshotChunkPayloadBytes &&
                           out.chunks == (out.bytes + out.chunk_bytes - 1) / out.chunk_bytes;
  if (!sizes_agree) {
    return DataLossError("etcd snapshot descriptor " + key + " is inconsistent: " + std::to_string(out.chunks) +
                         " chunks of " + std::to_string(out.chunk_bytes) + " bytes cannot hold " +
                         std::to_string(out.bytes) + " bytes");
  }
  return out;
}

Result<std::string> EncodeSnapshotImage(uint64_t seq, std::string_view state, const JournalBatch& tables) {
  if (state.size() > kMaxBlobBytes) {
    return ResourceExhaustedError("the snapshot at record " + std::to_string(seq) + " is " +
                                  std::to_string(state.size()) + " bytes, over the etcd snapshot's limit of " +
                                  std::to_string(kMaxBlobBytes));
  }
  for (const auto& put : tables.result_puts()) {
    if (put.bytes.size() > kMaxBlobBytes) {
      return ResourceExhaustedError("the result of closure " + std::to_string(put.closure_id) +
                                    " is over the etcd snapshot's limit of " + std::to_string(kMaxBlobBytes));
    }
  }
  capnp::MallocMessageBuilder message;
  auto image = message.initRoot<wire::SnapshotImage>();
  image.setSeq(seq);
  image.setState(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(state.data()), state.size()));
  EncodePass(tables, image.initTables());
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  return std::string(words.asChars().begin(), words.asChars().size());
}

Result<DecodedSnapshotImage> DecodeSnapshotImage(std::string_view image, const std::string& what) {
  if (image.size() < sizeof(capnp::word) || image.size() % sizeof(capnp::word) != 0) {
    return DataLossError(what + " is " + std::to_string(image.size()) + " bytes, not a whole number of words");
  }
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(image.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), image.data(), image.size());
  DecodedSnapshotImage out;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() {
                 capnp::ReaderOptions options;
                 options.traversalLimitInWords = words.size() * 2 + 64;
                 capnp::FlatArrayMessageReader reader(words, options);
                 auto root = reader.getRoot<wire::SnapshotImage>();
                 out.seq = root.getSeq();
                 out.state = AsString(root.getState());
                 out.tables = DecodePass(root.getTables());
               })) {
    return DataLossError(what + " does not decode: " + e->getDescription().cStr());
  }
  if (out.tables.record_count() != 0 || !out.tables.result_deletes().empty()) {
    return DataLossError(what + " holds journal records or deletions, which a snapshot never does");
  }
  return out;
}

SnapshotChunks CutSnapshot(uint64_t seq, std::string_view image, size_t payload_bytes) {
  SnapshotChunks out;
  out.descriptor.seq = seq;
  out.descriptor.bytes = image.size();
  out.descriptor.crc32c = Crc32c(image.data(), image.size());
  out.descriptor.chunk_bytes = payload_bytes;
  for (size_t at = 0; at < image.size(); at += payload_bytes) {
    const std::string_view payload = image.substr(at, payload_bytes);
    std::string value(4 + payload.size(), '\0');
    PutCrc(value, Crc32c(payload.data(), payload.size()));
    std::memcpy(value.data() + 4, payload.data(), payload.size());
    out.values.push_back(std::move(value));
  }
  out.descriptor.chunks = out.values.size();
  return out;
}

Result<std::string_view> SnapshotChunkPayload(std::string_view value, const std::string& key, size_t max_payload) {
  if (value.size() < 4 || value.size() - 4 > max_payload) {
    return DataLossError("etcd snapshot chunk " + key + " holds " + std::to_string(value.size()) +
                         " bytes, not a CRC32C and at most " + std::to_string(max_payload) + " bytes");
  }
  const std::string_view payload = value.substr(4);
  const uint32_t computed = Crc32c(payload.data(), payload.size());
  if (computed != GetCrc(value)) {
    return DataLossError("etcd snapshot chunk " + key + " fails its CRC32C (stored " +
                         std::to_string(GetCrc(value)) + ", computed " + std::to_string(computed) + ")");
  }
  return payload;
}

}  // namespace dispatch::ha
