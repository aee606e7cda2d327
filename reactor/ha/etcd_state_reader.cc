#include "reactor/ha/etcd_state_reader.h"

#include <algorithm>

#include "common/checksum.h"
#include "reactor/ha/wire/journal_group_codec.h"

namespace dispatch::ha {

kj::Promise<Status> EtcdStateReader::ReadSnapshot(int64_t revision, std::shared_ptr<DecodedSnapshotImage> out) {
  const std::string current = SnapshotCurrentKey(prefix_);
  return client_.Range(current, {}, 0, /*descending=*/false, revision)
      .then([this, current, revision, out](Result<etcd::RangeResult> range) -> kj::Promise<Status> {
        if (!range.ok()) return UnavailableError("cannot read " + current + " from etcd: " + range.status().ToString());
        if (range->kvs.empty()) return Status::Ok();  // no snapshot yet: the journal starts at 1
        auto descriptor = DecodeSnapshotDescriptor(range->kvs[0].value, current);
        if (!descriptor.ok()) return descriptor.status();
        auto image = std::make_shared<std::string>();
        image->reserve(descriptor->bytes);
        const SnapshotDescriptor d = *descriptor;
        return ReadChunks(d, 0, image, revision).then([this, d, image, out](Status read) -> Status {
          if (!read.ok()) return read;
          const std::string what = "the etcd snapshot at record " + std::to_string(d.seq);
          if (image->size() != d.bytes) {
            return DataLossError(what + " holds " + std::to_string(image->size()) + " bytes in its chunks, " +
                                 SnapshotCurrentKey(prefix_) + " says " + std::to_string(d.bytes));
          }
          if (Crc32c(image->data(), image->size()) != d.crc32c) {
            return DataLossError(what + " fails the CRC32C " + SnapshotCurrentKey(prefix_) + " holds");
          }
          auto decoded = DecodeSnapshotImage(*image, what);
          image->clear();
          if (!decoded.ok()) return decoded.status();
          if (decoded->seq != d.seq) {
            return DataLossError(what + " holds the image of record " + std::to_string(decoded->seq));
          }
          *out = std::move(decoded).value();
          return Status::Ok();
        });
      });
}

kj::Promise<Status> EtcdStateReader::LoadSnapshot(storage::Store& store, int64_t revision) {
  auto image = std::make_shared<DecodedSnapshotImage>();
  storage::Store* target = &store;
  return ReadSnapshot(revision, image).then([target, image](Status read) -> Status {
    if (!read.ok() || image->seq == 0) return read;
    return target->InstallSnapshot(image->seq, image->state, image->tables);
  });
}

kj::Promise<Status> EtcdStateReader::ReadChunks(SnapshotDescriptor descriptor, uint64_t next,
                                                std::shared_ptr<std::string> image, int64_t revision) {
  if (next == descriptor.chunks) return Status::Ok();
  const std::string from = SnapshotChunkKey(prefix_, descriptor.seq, next);
  const std::string end = SnapshotChunkKey(prefix_, descriptor.seq, descriptor.chunks);
  return client_.Range(from, end, kKeysPerRange, /*descending=*/false, revision)
      .then([this, descriptor, next, image, revision](Result<etcd::RangeResult> range) mutable -> kj::Promise<Status> {
        if (!range.ok()) return UnavailableError("cannot read the etcd snapshot's chunks: " + range.status().ToString());
        if (range->kvs.empty()) {
          return DataLossError("etcd snapshot chunk " + SnapshotChunkKey(prefix_, descriptor.seq, next) + " is missing");
        }
        for (const etcd::KeyValue& kv : range->kvs) {
          const std::string expected = SnapshotChunkKey(prefix_, descriptor.seq, next);
          if (kv.key != expected) {
            return DataLossError("etcd snapshot chunk " + expected + " is missing (the next key is " + kv.key + ")");
          }
          auto payload = SnapshotChunkPayload(kv.value, kv.key, descriptor.chunk_bytes);
          if (!payload.ok()) return payload.status();
          if (next + 1 < descriptor.chunks && payload->size() != descriptor.chunk_bytes) {
            return DataLossError("etcd snapshot chunk " + kv.key + " holds " + std::to_string(payload->size()) +
                                 " bytes, not " + std::to_string(descriptor.chunk_bytes));
          }
          image->append(payload->data(), payload->size());
          ++next;
        }
        return ReadChunks(descriptor, next, image, revision);
      });
}

kj::Promise<Status> EtcdStateReader::ReadJournal(storage::Store& store, int64_t revision) {
  return ReadJournalFrom(store, JournalKey(prefix_, store.last_seq() + 1), revision);
}

kj::Promise<Status> EtcdStateReader::ReadJournalFrom(storage::Store& store, std::string from, int64_t revision) {
  const std::string end = etcd::PrefixEnd(prefix_ + "/journal/");
  storage::Store* target = &store;
  const int64_t limit = journal_keys_per_range_;
  return client_.Range(from, end, limit, /*descending=*/false, revision)
      .then([this, target, from, limit, revision](Result<etcd::RangeResult> range) -> kj::Promise<Status> {
        if (!range.ok() && range.status().code() == StatusCode::kResourceExhausted && limit > kKeysPerRange) {
          ++ranges_shrunk_;
          journal_keys_per_range_ = std::max(kKeysPerRange, limit / 2);
          return ReadJournalFrom(*target, from, revision);
        }
        if (!range.ok()) return UnavailableError("cannot read the journal from etcd: " + range.status().ToString());
        for (const etcd::KeyValue& kv : range->kvs) {
          Status applied = ApplyGroup(*target, kv);
          if (!applied.ok()) return applied;
        }
        if (!range->more || range->kvs.empty()) return Status::Ok();
        journal_keys_per_range_ = std::min(kMaxJournalKeysPerRange, limit * 2);
        return ReadJournalFrom(*target, range->kvs.back().key + std::string(1, '\0'), revision);
      });
}

Status EtcdStateReader::ApplyGroup(storage::Store& store, const etcd::KeyValue& kv) {
  Result<DecodedGroup> group = DecodeJournalGroup(kv.value, kv.key);
  if (!group.ok()) return group.status();
  if (kv.key != JournalKey(prefix_, group->first_seq)) {
    return DataLossError("etcd journal key " + kv.key + " holds the group of sequence number " +
                         std::to_string(group->first_seq));
  }
  if (group->first_seq != store.last_seq() + 1) {
    return DataLossError("etcd journal gap: key " + kv.key + " follows sequence number " +
                         std::to_string(store.last_seq()));
  }
  for (const JournalBatch& pass : group->passes) {
    Result<uint64_t> committed = store.Commit(pass);
    if (!committed.ok()) return committed.status();
    if (record_observer_) {
      for (const std::string& record : pass.records()) record_observer_(record);
    }
  }
  ++groups_read_;
  return Status::Ok();
}

}  // namespace dispatch::ha
