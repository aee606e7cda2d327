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
#include <memory>
#include <string>

#include <kj/async.h>

#include "common/status.h"
#include "reactor/etcd/etcd_client.h"
#include "reactor/ha/snapshot_codec.h"
#include "storage/store.h"

namespace dispatch::ha {

class EtcdStateReader {
 public:
  EtcdStateReader(etcd::EtcdClient& client, std::string prefix) : client_(client), prefix_(std::move(prefix)) {}

  // Journal keys read per range request: each value is at most
  // kMaxEtcdBatchBytes; callers size the client's answer limit for it.
  static constexpr int64_t kKeysPerRange = 4;

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

  uint64_t groups_read() const { return groups_read_; }

 private:
  kj::Promise<Status> ReadChunks(SnapshotDescriptor descriptor, uint64_t next, std::shared_ptr<std::string> image,
                                 int64_t revision);
  kj::Promise<Status> ReadJournalFrom(storage::Store& store, std::string from, int64_t revision);

  etcd::EtcdClient& client_;
  const std::string prefix_;
  uint64_t groups_read_ = 0;
};

}  // namespace dispatch::ha
