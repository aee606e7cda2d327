// The pieces the etcd values of HA mode share (reactor/ha/wire/journal_group.capnp):
// a pass (what one local Store::Commit wrote) as a capnp Pass, the framing
// of a flat message behind its CRC32C, and the fixed-width decimal of keys.
// Used by the journal group codec and the snapshot codec.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <capnp/message.h>
#include <kj/array.h>

#include "common/status.h"
#include "reactor/ha/wire/journal_group.capnp.h"
#include "common/journal_batch.h"

namespace dispatch::ha {

void EncodePass(const JournalBatch& batch, wire::Pass::Builder pass);
// Throws (KJ) on a malformed pass: callers run it under runCatchingExceptions.
JournalBatch DecodePass(wire::Pass::Reader pass);

capnp::Data::Reader AsData(const std::string& s);
std::string AsString(capnp::Data::Reader d);

// 4 bytes of CRC32C (little endian) of the body, then the body: the message
// in Cap'n Proto's packed encoding, or (`compress`) that encoding gzipped at
// zlib's fastest level when that is smaller. A packed message never starts
// with gzip's magic bytes 1f 8b (they would claim 2^24 segments or more), so
// the reader tells the two apart without a flag.
std::string FrameMessage(capnp::MessageBuilder& message, bool compress = false);
// The frame alone: the CRC32C of `body` (little endian), then `body`.
std::string WithCrc32c(std::string_view body);
// The aligned flat words of a framed value; DataLoss naming `what` when it
// is too short, fails its CRC32C, or does not decompress or unpack.
Result<kj::Array<capnp::word>> UnframeMessage(std::string_view value, const std::string& what);

// `n` as 20 zero-padded decimal digits: numeric order is etcd's key order.
std::string KeyDigits(uint64_t n);

}  // namespace dispatch::ha
