#include "reactor/ha/etcd_journal.h"

#include <uv.h>

#include <algorithm>

#include <kj/debug.h>

#include "common/log.h"
#include "common/rpc_status.h"
#include "reactor/ha/etcd_snapshot_writer.h"
#include "reactor/ha/wire/journal_group_codec.h"

namespace dispatch::ha {

EtcdJournal::EtcdJournal(uvkj::UvAsyncIo& io, etcd::EtcdClient& client, EtcdJournalOptions options,
                         std::function<void(const Status&)> on_failure)
    : io_(io),
      client_(client),
      options_(std::move(options)),
      on_failure_(std::move(on_failure)),
      leader_key_(options_.prefix + "/leader") {}

EtcdJournal::~EtcdJournal() noexcept(false) = default;

Status EtcdJournal::Admit() {
  if (failed_) return UnavailableError("the etcd journal failed: this dispatcher no longer leads");
  if (queued_bytes_ <= options_.max_queued_bytes) return Status::Ok();
  ++stats_.refused_backlog;
  return UnavailableError("the etcd journal is behind: " + std::to_string(queued_bytes_) +
                          " bytes wait for etcd (limit " + std::to_string(options_.max_queued_bytes) +
                          " bytes); nothing was changed, retry later");
}

void EtcdJournal::Written(uint64_t write, const JournalBatch* pass, uint64_t first_seq) {
  if (failed_) return;
  if (pass == nullptr) {
    // No records (a local snapshot's record): in etcd once everything
    // before it is.
    if (!waiting_.empty()) {
      waiting_.back().last_write = write;
    } else if (!in_flight_.empty()) {
      in_flight_.back().last_write = write;
    } else {
      durable_ = write;
      if (listener() != nullptr) listener()->OnStageAdvanced();
    }
    return;
  }
  const JournalBatch& batch = *pass;
  const size_t bytes = EstimatePassBytes(batch);
  if (bytes > options_.max_group_bytes) {
    // Submit's limits make this impossible: a bug, never a peer's doing.
    Fatal(InternalError("BUG: one group commit of " + std::to_string(bytes) +
                        " bytes does not fit one etcd transaction (kMaxEtcdBatchBytes " +
                        std::to_string(options_.max_group_bytes) + ")"));
    return;
  }
  // The open group is the last waiting one: a group in flight never grows.
  const bool can_join = !waiting_.empty() && !waiting_.back().closed;
  if (can_join && waiting_.back().bytes + bytes > options_.max_group_bytes) ++stats_.groups_split;
  if (!can_join || waiting_.back().bytes + bytes > options_.max_group_bytes) {
    Group group;
    group.first_seq = first_seq;
    group.next_seq = first_seq;
    waiting_.push_back(std::move(group));
    stats_.groups_queued_max =
        std::max<uint64_t>(stats_.groups_queued_max, waiting_.size() + in_flight_.size());
  }
  Group& open = waiting_.back();
  KJ_ASSERT(open.next_seq == first_seq, "passes must be appended in sequence", open.next_seq, first_seq);
  auto copy = std::make_unique<JournalBatch>();
  for (const std::string& r : batch.records()) copy->AddRecord(r);
  for (const auto& d : batch.dataset_puts()) copy->PutDataset(d.key, d.definition);
  for (const auto& r : batch.result_puts()) copy->PutResult(r.closure_id, r.bytes);
  for (uint64_t id : batch.result_deletes()) copy->DeleteResult(id);
  open.next_seq += batch.record_count();
  open.bytes += bytes;
  queued_bytes_ += bytes;
  open.passes.push_back(std::move(copy));
  open.last_write = write;
  SendWaiting();
}

kj::Promise<void> EtcdJournal::WhenAcknowledged(uint64_t seq) {
  if (failed_) return KJ_EXCEPTION(DISCONNECTED, "the etcd journal failed");
  if (acknowledged_seq_ >= seq) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  seq_waiters_.emplace_back(seq, kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

void EtcdJournal::SendWaiting() {
  while (!failed_ && in_flight_.size() < std::max<size_t>(1, options_.max_in_flight) &&
         !waiting_.empty()) {
    in_flight_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    Group& group = in_flight_.back();
    queued_bytes_ -= std::min(queued_bytes_, group.bytes);
    std::vector<const JournalBatch*> passes;
    for (const auto& pass : group.passes) passes.push_back(pass.get());
    group.value = EncodeJournalGroup(group.first_seq, passes);
    group.passes.clear();  // the value holds them now
    if (group.value.size() > options_.max_group_bytes) {
      Fatal(InternalError("BUG: a journal group encoded to " + std::to_string(group.value.size()) +
                          " bytes, over kMaxEtcdBatchBytes " +
                          std::to_string(options_.max_group_bytes)));
      return;
    }
    tasks_.add(Send(group));
  }
}

EtcdJournal::Group* EtcdJournal::InFlight(uint64_t first_seq) {
  for (Group& group : in_flight_) {
    if (group.first_seq == first_seq) return &group;
  }
  return nullptr;
}

kj::Promise<void> EtcdJournal::Send(Group& group) {
  const std::string key = JournalKey(options_.prefix, group.first_seq);
  etcd::Txn txn;
  txn.compare.push_back(etcd::Compare::CreateRevisionIs(leader_key_, options_.leader_revision));
  txn.compare.push_back(etcd::Compare::VersionIs(key, 0));
  txn.success.push_back(etcd::Op::Put(key, group.value));
  txn.failure.push_back(etcd::Op::Get(leader_key_));
  txn.failure.push_back(etcd::Op::Get(key));
  group.sent_ns = uv_hrtime();
  const uint64_t first_seq = group.first_seq;
  return client_.Commit(txn).then([this, first_seq](Result<etcd::TxnResult> result) {
    OnAnswer(first_seq, std::move(result));
  });
}

void EtcdJournal::OnAnswer(uint64_t first_seq, Result<etcd::TxnResult> result) {
  Group* found = failed_ ? nullptr : InFlight(first_seq);
  if (found == nullptr) return;
  Group& group = *found;
  const std::string key = JournalKey(options_.prefix, group.first_seq);
  if (!result.ok()) {
    if (result.status().code() == StatusCode::kUnavailable) {
      // It may or may not have landed: send the same again (the slot
      // compare makes that safe). A lost lease ends this through the
      // election (on_failure), not here.
      ++stats_.transaction_retries;
      Log(LogLevel::kWarning, "etcd journal transaction for ", key.c_str(), " unanswered (",
          result.status().ToString().c_str(), "); sending it again");
      tasks_.add(io_.timer()
                     .afterDelay(options_.retry_delay.count() * kj::MILLISECONDS)
                     .then([this, first_seq]() -> kj::Promise<void> {
                       Group* again = failed_ ? nullptr : InFlight(first_seq);
                       if (again == nullptr) return kj::READY_NOW;
                       return Send(*again);
                     }));
      return;
    }
    Fatal(UnavailableError("the etcd journal refused " + key + ": " + result.status().ToString()));
    return;
  }
  if (result->succeeded) {
    Acknowledged(group);
    return;
  }
  // The failure branch: who leads, and what the slot holds.
  int64_t leader_revision = 0;
  std::string leader_value;
  std::string slot_value;
  bool slot_taken = false;
  if (result->responses.size() >= 2) {
    if (!result->responses[0].range.kvs.empty()) {
      leader_revision = result->responses[0].range.kvs[0].create_revision;
      leader_value = result->responses[0].range.kvs[0].value;
    }
    if (!result->responses[1].range.kvs.empty()) {
      slot_taken = true;
      slot_value = result->responses[1].range.kvs[0].value;
    }
  }
  if (leader_revision == options_.leader_revision && slot_taken && slot_value == group.value) {
    Acknowledged(group);  // a retry whose first attempt had landed
    return;
  }
  if (leader_revision != options_.leader_revision) {
    Fatal(FailedPreconditionError(
        "fenced: " + leader_key_ + " was created at revision " + std::to_string(leader_revision) +
        (leader_value.empty() ? std::string(" (absent)") : " by " + leader_value) +
        ", our leadership is revision " + std::to_string(options_.leader_revision) +
        "; another dispatcher leads, nothing of " + key + " was acknowledged"));
    return;
  }
  Fatal(FailedPreconditionError("fenced: the etcd journal slot " + key +
                                " already holds another value; nothing of it was acknowledged"));
}

void EtcdJournal::Acknowledged(Group& group) {
  const uint64_t now = uv_hrtime();
  group.acknowledged = true;
  ++stats_.transactions;
  stats_.bytes += group.value.size();
  stats_.records += group.next_seq - group.first_seq;
  stats_.transaction_seconds.Observe(static_cast<double>(now - group.sent_ns) * 1e-9);
  stats_.bytes_per_transaction.Observe(static_cast<double>(group.value.size()));
  stats_.records_per_transaction.Observe(static_cast<double>(group.next_seq - group.first_seq));
  // Durable in order: only an acknowledged front moves the stage on.
  uint64_t durable = durable_;
  while (!in_flight_.empty() && in_flight_.front().acknowledged) {
    acknowledged_seq_ = in_flight_.front().next_seq - 1;
    durable = in_flight_.front().last_write;
    in_flight_.pop_front();
  }
  // Sent before the replies go, so the next round trip starts at once.
  SendWaiting();
  if (durable == durable_) return;
  durable_ = durable;
  for (auto it = seq_waiters_.begin(); it != seq_waiters_.end();) {
    if (it->first <= acknowledged_seq_) {
      it->second->fulfill();
      it = seq_waiters_.erase(it);
    } else {
      ++it;
    }
  }
  if (listener() != nullptr) listener()->OnStageAdvanced();
}

void EtcdJournal::SnapshotStarted(uint64_t seq) {
  // A group in flight is closed already; the open one may not grow past seq.
  if (!waiting_.empty() && waiting_.back().next_seq == seq + 1) waiting_.back().closed = true;
  if (snapshot_writer_ != nullptr) snapshot_writer_->Started(seq);
}

void EtcdJournal::SnapshotEnded(uint64_t seq, const storage::SnapshotFileInfo* recorded) {
  if (snapshot_writer_ != nullptr) snapshot_writer_->Ended(seq, recorded);
}

void EtcdJournal::Fatal(const Status& status) {
  if (failed_) return;
  Log(LogLevel::kError, "etcd journal: ", status.ToString().c_str());
  Fail(status);
  if (on_failure_) on_failure_(status);
}

void EtcdJournal::Fail(const Status& status) {
  if (failed_) return;
  failed_ = true;
  for (auto& [seq, fulfiller] : seq_waiters_) fulfiller->reject(ExceptionFromStatus(status));
  seq_waiters_.clear();
  in_flight_.clear();
  waiting_.clear();
  queued_bytes_ = 0;
}

void EtcdJournal::taskFailed(kj::Exception&& exception) {
  Fatal(InternalError(std::string("etcd journal task failed: ") + exception.getDescription().cStr()));
}

}  // namespace dispatch::ha
