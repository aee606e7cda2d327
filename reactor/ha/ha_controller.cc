#include "reactor/ha/ha_controller.h"

#include <uv.h>

#include <algorithm>

#include <kj/debug.h>

#include "common/log.h"
#include "common/checksum.h"
#include "reactor/ha/journal_group_codec.h"

namespace dispatch::ha {
namespace {

// Journal keys read per range request: at most 64 MiB of answer at
// kMaxEtcdBatchBytes each, under the client's answer limit... kept small so
// one answer stays far below it.
constexpr int64_t kKeysPerRange = 4;

}  // namespace

Result<std::vector<std::string>> ParseEtcdEndpoints(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.rfind("http://", 0) != 0 || item.size() <= 7) {
      return InvalidArgumentError("--etcd entries must be http://HOST:PORT, got '" + item + "' in '" +
                                  list + "'");
    }
    out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

HaController::HaController(uvkj::UvAsyncIo& io, reactor::DispatcherServer& server, HaOptions options)
    : io_(io), server_(server), options_(std::move(options)) {
  etcd::EtcdClientOptions client_options;
  client_options.endpoints = options_.endpoints;
  // An answer holds at most kKeysPerRange values of kMaxEtcdBatchBytes,
  // base64-encoded.
  client_options.max_answer_bytes =
      std::max<size_t>(client_options.max_answer_bytes, (kKeysPerRange + 1) * reactor::kMaxEtcdBatchBytes * 2);
  client_ = std::make_unique<etcd::EtcdClient>(io_, client_options);
}

HaController::~HaController() {
  rebuild_ = nullptr;
  election_.reset();
  if (journal_ != nullptr) journal_->SetSnapshotWriter(nullptr);
  snapshots_.reset();
  // The server's journal refers to journal_: it is never used after the
  // loop stopped, and the server is destroyed after this object's owner
  // is done with both.
  journal_.reset();
  client_.reset();
}

void HaController::Start() {
  etcd::LeaderElectionOptions election_options;
  election_options.key = options_.prefix + "/leader";
  election_options.value = options_.advertise;
  // Whole seconds, at least 2 (etcd raises a smaller TTL at its default timing).
  election_options.lease_ttl_seconds =
      std::max<int64_t>(2, static_cast<int64_t>((options_.lease_ttl_ms + 999) / 1000));
  etcd::LeaderElectionCallbacks callbacks;
  callbacks.elected = [this](int64_t revision) { OnElected(revision); };
  callbacks.following = [this](const etcd::KeyValue& leader) {
    Log(LogLevel::kInfo, "standby: the leader is ", leader.value.c_str());
    server_.SetStandbyOf(leader.value);
  };
  callbacks.lost = [this](const Status& why) { Stop(why); };
  election_ = std::make_unique<etcd::LeaderElection>(io_, *client_, election_options, callbacks);
  Log(LogLevel::kInfo, "HA mode: campaigning for ", election_options.key.c_str(), " on ",
      client_->endpoint().c_str(), " as ", options_.advertise.c_str(), " (lease TTL ",
      election_options.lease_ttl_seconds, " s)");
  election_->Start();
}

void HaController::OnElected(int64_t leader_revision) {
  Log(LogLevel::kInfo, "elected (leader revision ", leader_revision, "): reading the journal from etcd");
  Result<storage::Store*> store = server_.OpenHaStore();
  if (!store.ok()) {
    Stop(store.status());
    return;
  }
  const uint64_t start = uv_hrtime();
  storage::Store& local = **store;
  rebuild_ = LoadSnapshot(local)
                 .then([this, &local]() {
                   return ReadJournal(local, JournalKey(options_.prefix, local.last_seq() + 1));
                 })
                 .then([this, leader_revision, start, &local]() {
                   EtcdJournalOptions journal_options;
                   journal_options.prefix = options_.prefix;
                   journal_options.leader_revision = leader_revision;
                   journal_ = std::make_unique<EtcdJournal>(
                       io_, *client_, journal_options, [this](const Status& why) { Stop(why); });
                   // etcd holds every record the local store was filled with.
                   journal_->StartAfter(local.last_seq());
                   EtcdSnapshotWriterOptions snapshot_options;
                   snapshot_options.prefix = options_.prefix;
                   snapshot_options.leader_revision = leader_revision;
                   snapshot_options.kill_before_switch = options_.test_kill_before_snapshot_switch;
                   snapshots_ = std::make_unique<EtcdSnapshotWriter>(
                       io_, *client_, *journal_, local, snapshot_options, [this](const Status& why) { Stop(why); });
                   journal_->SetSnapshotWriter(snapshots_.get());
                   Log(LogLevel::kInfo, "read the snapshot at record ", local.snapshot_seq(), " and ", groups_read_,
                       " journal groups from etcd (last sequence number ", local.last_seq(), ") in ",
                       (uv_hrtime() - start) / 1000000, " ms");
                   Status leading = server_.BecomeLeader(journal_.get());
                   if (!leading.ok()) Stop(leading);
                 })
                 .eagerlyEvaluate([this](kj::Exception&& e) {
                   Stop(InternalError(std::string("rebuilding from etcd failed: ") + e.getDescription().cStr()));
                 });
}

kj::Promise<void> HaController::LoadSnapshot(storage::Store& store) {
  const std::string current = SnapshotCurrentKey(options_.prefix);
  return client_->Range(current).then([this, &store, current](Result<etcd::RangeResult> range) -> kj::Promise<void> {
    if (!range.ok()) {
      Stop(UnavailableError("cannot read " + current + " from etcd: " + range.status().ToString()));
      return kj::NEVER_DONE;
    }
    if (range->kvs.empty()) return kj::READY_NOW;  // no snapshot yet: the journal starts at 1
    auto descriptor = DecodeSnapshotDescriptor(range->kvs[0].value, current);
    if (!descriptor.ok()) {
      Stop(descriptor.status());
      return kj::NEVER_DONE;
    }
    auto image = std::make_shared<std::string>();
    image->reserve(descriptor->bytes);
    const SnapshotDescriptor d = *descriptor;
    return ReadChunks(d, 0, image).then([this, &store, descriptor = d, image]() -> kj::Promise<void> {
      const std::string what = "the etcd snapshot at record " + std::to_string(descriptor.seq);
      Status status;
      if (image->size() != descriptor.bytes) {
        status = DataLossError(what + " holds " + std::to_string(image->size()) + " bytes in its chunks, " +
                               SnapshotCurrentKey(options_.prefix) + " says " + std::to_string(descriptor.bytes));
      } else if (Crc32c(image->data(), image->size()) != descriptor.crc32c) {
        status = DataLossError(what + " fails the CRC32C " + SnapshotCurrentKey(options_.prefix) + " holds");
      }
      if (status.ok()) {
        auto decoded = DecodeSnapshotImage(*image, what);
        image->clear();
        if (!decoded.ok()) {
          status = decoded.status();
        } else if (decoded->seq != descriptor.seq) {
          status = DataLossError(what + " holds the image of record " + std::to_string(decoded->seq));
        } else {
          status = store.InstallSnapshot(decoded->seq, decoded->state, decoded->tables);
        }
      }
      if (!status.ok()) {
        Stop(status);
        return kj::NEVER_DONE;
      }
      return kj::READY_NOW;
    });
  });
}

kj::Promise<void> HaController::ReadChunks(SnapshotDescriptor descriptor, uint64_t next,
                                           std::shared_ptr<std::string> image) {
  if (next == descriptor.chunks) return kj::READY_NOW;
  const std::string from = SnapshotChunkKey(options_.prefix, descriptor.seq, next);
  const std::string end = SnapshotChunkKey(options_.prefix, descriptor.seq, descriptor.chunks);
  return client_->Range(from, end, kKeysPerRange)
      .then([this, descriptor, next, image](Result<etcd::RangeResult> range) mutable -> kj::Promise<void> {
        if (!range.ok()) {
          Stop(UnavailableError("cannot read the etcd snapshot's chunks: " + range.status().ToString()));
          return kj::NEVER_DONE;
        }
        for (const etcd::KeyValue& kv : range->kvs) {
          const std::string expected = SnapshotChunkKey(options_.prefix, descriptor.seq, next);
          Status status;
          if (kv.key != expected) {
            status = DataLossError("etcd snapshot chunk " + expected + " is missing (the next key is " + kv.key + ")");
          } else {
            auto payload = SnapshotChunkPayload(kv.value, kv.key, descriptor.chunk_bytes);
            if (!payload.ok()) {
              status = payload.status();
            } else if (next + 1 < descriptor.chunks && payload->size() != descriptor.chunk_bytes) {
              status = DataLossError("etcd snapshot chunk " + kv.key + " holds " + std::to_string(payload->size()) +
                                     " bytes, not " + std::to_string(descriptor.chunk_bytes));
            } else {
              image->append(payload->data(), payload->size());
            }
          }
          if (!status.ok()) {
            Stop(status);
            return kj::NEVER_DONE;
          }
          ++next;
        }
        if (range->kvs.empty()) {
          Stop(DataLossError("etcd snapshot chunk " + SnapshotChunkKey(options_.prefix, descriptor.seq, next) +
                             " is missing"));
          return kj::NEVER_DONE;
        }
        return ReadChunks(descriptor, next, image);
      });
}

kj::Promise<void> HaController::ReadJournal(storage::Store& store, std::string from) {
  const std::string end = etcd::PrefixEnd(options_.prefix + "/journal/");
  return client_->Range(from, end, kKeysPerRange)
      .then([this, &store, end](Result<etcd::RangeResult> range) -> kj::Promise<void> {
        if (!range.ok()) {
          // A candidate cannot lead without the whole journal; the
          // supervisor's restart tries again.
          Stop(UnavailableError("cannot read the journal from etcd: " + range.status().ToString()));
          return kj::NEVER_DONE;
        }
        for (const etcd::KeyValue& kv : range->kvs) {
          Result<DecodedGroup> group = DecodeJournalGroup(kv.value, kv.key);
          Status status = group.status();
          if (status.ok() && kv.key != JournalKey(options_.prefix, group->first_seq)) {
            status = DataLossError("etcd journal key " + kv.key + " holds the group of sequence number " +
                                   std::to_string(group->first_seq));
          }
          if (status.ok() && group->first_seq != store.last_seq() + 1) {
            status = DataLossError("etcd journal gap: key " + kv.key + " follows sequence number " +
                                   std::to_string(store.last_seq()));
          }
          if (status.ok()) {
            for (const storage::Batch& pass : group->passes) {
              Result<uint64_t> committed = store.Commit(pass);
              if (!committed.ok()) {
                status = committed.status();
                break;
              }
            }
          }
          if (!status.ok()) {
            Stop(status);
            return kj::NEVER_DONE;
          }
          ++groups_read_;
        }
        if (!range->more || range->kvs.empty()) return kj::READY_NOW;
        return ReadJournal(store, range->kvs.back().key + std::string(1, '\0'));
      });
}

void HaController::Stop(const Status& why) {
  Log(LogLevel::kError, "HA: ", why.ToString().c_str());
  server_.StopOnLeadershipLost(why);
}

}  // namespace dispatch::ha
