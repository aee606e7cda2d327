#include "reactor/ha/wire/journal_group_codec.h"

#include <cstdio>
#include <cstring>

#include <capnp/message.h>
#include <capnp/serialize-packed.h>
#include <capnp/serialize.h>
#include <kj/compat/gzip.h>
#include <kj/io.h>
#include <kj/vector.h>
#include <kj/exception.h>

#include "common/checksum.h"
#include "reactor/ha/wire/pass_codec.h"

namespace dispatch::ha {
namespace {

constexpr size_t kPerItemBytes = 16;   // a list pointer and padding to a word
constexpr size_t kPerPassBytes = 128;  // the pass struct and its six list pointers
// An etcd value is at most ~1.5 MiB packed; unpacked, no value of ours is
// over a few MiB. More is damage that passed the CRC (never ours).
constexpr uint64_t kMaxUnpackedWords = (uint64_t{8} << 20) / sizeof(capnp::word);
constexpr int kGzipLevel = 1;
constexpr kj::byte kGzipMagic[2] = {0x1f, 0x8b};

}  // namespace

size_t EstimatePassBytes(const JournalBatch& pass) {
  const size_t items = pass.records().size() + 2 * pass.dataset_puts().size() +
                       2 * pass.result_puts().size() + pass.result_deletes().size();
  size_t keys = 0;
  for (const auto& put : pass.dataset_puts()) keys += put.key.size();
  return pass.payload_bytes() + keys + items * kPerItemBytes + kPerPassBytes;
}

void EncodePass(const JournalBatch& batch, wire::Pass::Builder pass) {
  auto records = pass.initRecords(static_cast<unsigned>(batch.records().size()));
  for (unsigned k = 0; k < records.size(); ++k) records.set(k, AsData(batch.records()[k]));
  const auto& datasets = batch.dataset_puts();
  auto keys = pass.initDatasetKeys(static_cast<unsigned>(datasets.size()));
  auto defs = pass.initDatasetDefinitions(static_cast<unsigned>(datasets.size()));
  for (unsigned k = 0; k < datasets.size(); ++k) {
    keys.set(k, datasets[k].key);
    defs.set(k, AsData(datasets[k].definition));
  }
  const auto& results = batch.result_puts();
  auto ids = pass.initResultIds(static_cast<unsigned>(results.size()));
  auto bytes = pass.initResultBytes(static_cast<unsigned>(results.size()));
  for (unsigned k = 0; k < results.size(); ++k) {
    ids.set(k, results[k].closure_id);
    bytes.set(k, AsData(results[k].bytes));
  }
  auto deletes = pass.initResultDeletes(static_cast<unsigned>(batch.result_deletes().size()));
  for (unsigned k = 0; k < deletes.size(); ++k) deletes.set(k, batch.result_deletes()[k]);
}

JournalBatch DecodePass(wire::Pass::Reader pass) {
  JournalBatch batch;
  for (auto record : pass.getRecords()) batch.AddRecord(AsString(record));
  auto keys = pass.getDatasetKeys();
  auto defs = pass.getDatasetDefinitions();
  KJ_REQUIRE(keys.size() == defs.size(), "dataset keys and definitions differ in number");
  for (unsigned k = 0; k < keys.size(); ++k) {
    // Our keys are text without NUL (a NUL would not survive Text again:
    // journal_group fuzzer).
    KJ_REQUIRE(std::memchr(keys[k].cStr(), '\0', keys[k].size()) == nullptr, "a dataset key holds a NUL byte");
    batch.PutDataset(std::string(keys[k].cStr(), keys[k].size()), AsString(defs[k]));
  }
  auto ids = pass.getResultIds();
  auto bytes = pass.getResultBytes();
  KJ_REQUIRE(ids.size() == bytes.size(), "result ids and bytes differ in number");
  for (unsigned k = 0; k < ids.size(); ++k) batch.PutResult(ids[k], AsString(bytes[k]));
  for (uint64_t id : pass.getResultDeletes()) batch.DeleteResult(id);
  return batch;
}

std::string EncodeJournalGroup(uint64_t first_seq, const std::vector<const JournalBatch*>& passes) {
  capnp::MallocMessageBuilder message;
  auto group = message.initRoot<wire::JournalGroup>();
  group.setFirstSeq(first_seq);
  auto list = group.initPasses(static_cast<unsigned>(passes.size()));
  for (unsigned i = 0; i < passes.size(); ++i) EncodePass(*passes[i], list[i]);
  return FrameMessage(message, /*compress=*/true);
}

capnp::Data::Reader AsData(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(s.data()), s.size());
}

std::string AsString(capnp::Data::Reader d) {
  return std::string(reinterpret_cast<const char*>(d.begin()), d.size());
}

std::string FrameMessage(capnp::MessageBuilder& message, bool compress) {
  // Packed: a journal group is mostly small structs and short records,
  // whose zero bytes packing drops. Gzipped as well: closure records repeat
  // themselves (closures-ha: 3.8x fewer bytes than packed alone), and etcd's
  // time for a transaction grows with its bytes (its JSON gateway: about
  // 4 ms for 64 KiB, 50 ms for 1 MiB), which under load is the closures'
  // round trip. Level 1 costs the loop about a millisecond per 100 KiB.
  kj::VectorOutputStream packed;
  capnp::writePackedMessage(packed, message);
  kj::ArrayPtr<const kj::byte> body = packed.getArray();
  kj::VectorOutputStream zipped;
  if (compress) {
    {
      kj::GzipOutputStream gzip(zipped, kGzipLevel);
      gzip.write(body.begin(), body.size());
    }  // the destructor finishes the stream
    if (zipped.getArray().size() < body.size()) body = zipped.getArray();
  }
  return WithCrc32c(std::string_view(reinterpret_cast<const char*>(body.begin()), body.size()));
}

std::string WithCrc32c(std::string_view body) {
  const uint32_t crc = Crc32c(body.data(), body.size());
  std::string value(4 + body.size(), '\0');
  for (int b = 0; b < 4; ++b) value[b] = static_cast<char>((crc >> (8 * b)) & 0xff);
  std::memcpy(value.data() + 4, body.data(), body.size());
  return value;
}

Result<kj::Array<capnp::word>> UnframeMessage(std::string_view value, const std::string& what) {
  if (value.size() < 4 + 2) {
    return DataLossError(what + " holds " + std::to_string(value.size()) +
                         " bytes, too few for a CRC32C and a packed message");
  }
  uint32_t stored = 0;
  for (int b = 0; b < 4; ++b) stored |= static_cast<uint32_t>(static_cast<unsigned char>(value[b])) << (8 * b);
  const uint32_t crc = Crc32c(value.data() + 4, value.size() - 4);
  if (crc != stored) {
    return DataLossError(what + " fails its CRC32C (stored " + std::to_string(stored) + ", computed " +
                         std::to_string(crc) + ")");
  }
  const auto body = kj::arrayPtr(reinterpret_cast<const kj::byte*>(value.data()) + 4, value.size() - 4);
  const bool gzipped = body[0] == kGzipMagic[0] && body[1] == kGzipMagic[1];
  kj::Array<capnp::word> words;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() {
                 kj::ArrayInputStream raw(body);
                 // The traversal limit bounds what is inflated too: the
                 // reader refuses a segment table over it before reading on.
                 kj::Maybe<kj::GzipInputStream> gunzip;
                 kj::Maybe<kj::BufferedInputStreamWrapper> buffered;
                 kj::BufferedInputStream* in = &raw;
                 if (gzipped) {
                   in = &buffered.emplace(gunzip.emplace(raw));
                 }
                 capnp::ReaderOptions options;
                 options.traversalLimitInWords = kMaxUnpackedWords;
                 capnp::PackedMessageReader reader(*in, options);
                 kj::Vector<kj::ArrayPtr<const capnp::word>> segments;
                 for (capnp::uint id = 0;; ++id) {
                   kj::ArrayPtr<const capnp::word> segment = reader.getSegment(id);
                   if (segment == nullptr) break;
                   segments.add(segment);
                 }
                 words = capnp::messageToFlatArray(segments.asPtr());
               })) {
    return DataLossError(what + (gzipped ? " does not inflate and unpack: " : " does not unpack: ") +
                         e->getDescription().cStr());
  }
  return words;
}

Result<DecodedGroup> DecodeJournalGroup(std::string_view value, const std::string& key) {
  auto framed = UnframeMessage(value, "etcd journal key " + key);
  if (!framed.ok()) return framed.status();
  kj::Array<capnp::word> words = std::move(framed).value();
  DecodedGroup out;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() {
                 capnp::ReaderOptions options;
                 options.traversalLimitInWords = words.size() * 2 + 64;
                 capnp::FlatArrayMessageReader reader(words, options);
                 auto group = reader.getRoot<wire::JournalGroup>();
                 out.first_seq = group.getFirstSeq();
                 for (auto pass : group.getPasses()) {
                   JournalBatch batch = DecodePass(pass);
                   out.record_count += batch.record_count();
                   out.passes.push_back(std::move(batch));
                 }
               })) {
    return DataLossError("etcd journal key " + key + " does not decode: " + e->getDescription().cStr());
  }
  return out;
}

std::string KeyDigits(uint64_t n) {
  char digits[32];
  snprintf(digits, sizeof(digits), "%020llu", static_cast<unsigned long long>(n));
  return digits;
}

std::string JournalKey(const std::string& prefix, uint64_t seq) { return prefix + "/journal/" + KeyDigits(seq); }

}  // namespace dispatch::ha
