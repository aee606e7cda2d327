// EtcdStateReader: fills a local store from etcd (docs/high_availability.md
// §5, §6): the snapshot (P/snapshot/current and its chunks, checked against
// the descriptor's sizes and CRC32C, installed as the store's snapshot), then
// the journal keys after the store's last record, each group checked (CRC,
// key, and that sequence numbers run on without a gap) and committed. Every
// refusal is a Status naming the key (DataLoss for damage); etcd failing to
// answer is Unavailable. Reads at `revision` (0: the latest) so that a reader
// racing a leader sees one consistent cut.
// REQUIRES: loop thread only; the client and the store outlive its promises.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <kj/async.h>

#include "common/status.h"
#include "reactor/etcd/etcd_client.h"
#include "reactor/ha/wire/snapshot_codec.h"
#include "storage/store.h"

namespace dispatch::ha {

class EtcdStateReader {
 public:
  EtcdStateReader(etcd::EtcdClient& client, std::string prefix) : client_(client), prefix_(std::move(prefix)) {}

  // Snapshot chunks read per range request: each is close to
  // kMaxEtcdBatchBytes; callers size the client's answer limit for this
  // many values of that size.
  static constexpr int64_t kKeysPerRange = 4;
  // Journal keys read per range request at first. Groups are mostly far
  // smaller than kMaxEtcdBatchBytes (a few KiB under load), so four per
  // request made a cold load of a few thousand groups take seconds of round
  // trips. etcd has no byte limit on a range: an answer over the client's
  // limit halves the count and asks again (down to kKeysPerRange, which
  // always fits), and the count grows back after each full answer.
  static constexpr int64_t kMaxJournalKeysPerRange = 1024;

  // The current snapshot's image into `out` (its seq stays 0 when there is
  // none).
  kj::Promise<Status> ReadSnapshot(int64_t revision, std::shared_ptr<DecodedSnapshotImage> out);
  // The snapshot (if any) into an empty store.
  kj::Promise<Status> LoadSnapshot(storage::Store& store, int64_t revision);
  // The journal keys after store.last_seq(), to the end (at `revision`).
  kj::Promise<Status> ReadJournal(storage::Store& store, int64_t revision);
  // One journal key's value: decoded, checked to follow store.last_seq(),
  // committed.
  Status ApplyGroup(storage::Store& store, const etcd::KeyValue& kv);

  // Called with each journal record ApplyGroup committed, in sequence
  // order (a hot standby applies it to its live state). Optional.
  void set_record_observer(std::function<void(std::string_view record)> observer) {
    record_observer_ = std::move(observer);
  }

  uint64_t groups_read() const { return groups_read_; }
  // Answers over the client's limit (each cost one range request again).
  uint64_t ranges_shrunk() const { return ranges_shrunk_; }

 private:
  kj::Promise<Status> ReadChunks(SnapshotDescriptor descriptor, uint64_t next, std::shared_ptr<std::string> image,
                                 int64_t revision);
  kj::Promise<Status> ReadJournalFrom(storage::Store& store, std::string from, int64_t revision);

  etcd::EtcdClient& client_;
  const std::string prefix_;
  std::function<void(std::string_view)> record_observer_;
  uint64_t groups_read_ = 0;
  uint64_t ranges_shrunk_ = 0;
  int64_t journal_keys_per_range_ = kMaxJournalKeysPerRange;
};

}  // namespace dispatch::ha
