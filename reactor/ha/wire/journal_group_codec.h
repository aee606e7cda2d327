// The value of one etcd journal key (reactor/ha/wire/journal_group.capnp): a list
// of passes (local group commits), packed and gzipped (pass_codec.h's
// FrameMessage) with a CRC32C in front, and back.
// Decoding refuses damage (DataLoss naming the key) and never trusts sizes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/journal_batch.h"

namespace dispatch::ha {

// Bytes a pass adds to a group's encoding, at most (payload plus Cap'n Proto
// pointers and padding): what the group's byte limit counts.
size_t EstimatePassBytes(const JournalBatch& pass);

// Encodes `passes` (records numbered from first_seq) as one etcd value.
std::string EncodeJournalGroup(uint64_t first_seq, const std::vector<const JournalBatch*>& passes);

struct DecodedGroup {
  uint64_t first_seq = 0;
  std::vector<JournalBatch> passes;
  uint64_t record_count = 0;
};

// Decodes a value written by EncodeJournalGroup; `key` names it in errors.
Result<DecodedGroup> DecodeJournalGroup(std::string_view value, const std::string& key);

// "P/journal/" followed by `seq` as 20 zero-padded digits (numeric order is
// etcd's key order).
std::string JournalKey(const std::string& prefix, uint64_t seq);

}  // namespace dispatch::ha
