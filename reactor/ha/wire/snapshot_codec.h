// The snapshot in etcd (docs/high_availability.md §2, §5): its keys, the
// image (the store's snapshot body plus the dataset definitions and closure
// results stored at its record, reactor/ha/wire/journal_group.capnp), the image
// cut into chunks of at most kSnapshotChunkBytes (each with its own CRC32C,
// so a damaged chunk is named), and the descriptor under P/snapshot/current
// (covered record S, chunk count, total bytes, CRC32C of the whole).
// Decoding refuses damage (DataLoss naming the key) and never trusts sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/journal_batch.h"

namespace dispatch::ha {

// A chunk's value: 4 bytes of CRC32C, then at most this many bytes of image,
// so a chunk stays within one etcd value of kMaxEtcdBatchBytes.
inline constexpr size_t kSnapshotChunkPayloadBytes = (size_t{1} << 20) - 4;

// "P/snapshot/": every snapshot key is under it.
std::string SnapshotPrefix(const std::string& prefix);
// "P/snapshot/S/": the chunks of the snapshot of record S.
std::string SnapshotChunkPrefix(const std::string& prefix, uint64_t seq);
// "P/snapshot/S/CHUNK", both 20 digits.
std::string SnapshotChunkKey(const std::string& prefix, uint64_t seq, uint64_t chunk);
// "P/snapshot/current": sorts after every chunk key ('c' > '9').
std::string SnapshotCurrentKey(const std::string& prefix);

struct SnapshotDescriptor {
  uint64_t seq = 0;
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  uint64_t chunk_bytes = kSnapshotChunkPayloadBytes;
};

std::string EncodeSnapshotDescriptor(const SnapshotDescriptor& descriptor);
// DataLoss naming `key` when damaged or inconsistent (chunk count against
// bytes and chunk size).
Result<SnapshotDescriptor> DecodeSnapshotDescriptor(std::string_view value, const std::string& key);

// The image of the state after record `seq`: `state` is the store's snapshot
// body, `tables` holds dataset puts and result puts only. ResourceExhausted
// when a part is over Cap'n Proto's 512 MiB blob limit.
Result<std::string> EncodeSnapshotImage(uint64_t seq, std::string_view state, const JournalBatch& tables);

struct DecodedSnapshotImage {
  uint64_t seq = 0;
  std::string state;
  JournalBatch tables;
};
// DataLoss naming `what` when the image does not decode or holds records.
Result<DecodedSnapshotImage> DecodeSnapshotImage(std::string_view image, const std::string& what);

// The chunk values of `image` and the descriptor that names them.
struct SnapshotChunks {
  SnapshotDescriptor descriptor;
  std::vector<std::string> values;
};
SnapshotChunks CutSnapshot(uint64_t seq, std::string_view image,
                           size_t payload_bytes = kSnapshotChunkPayloadBytes);
// A chunk value's payload, its CRC32C checked: DataLoss naming `key` when
// it fails, or when it is longer than `max_payload`.
Result<std::string_view> SnapshotChunkPayload(std::string_view value, const std::string& key,
                                              size_t max_payload);

}  // namespace dispatch::ha
