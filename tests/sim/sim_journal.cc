#include "tests/sim/sim_journal.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <algorithm>

#include "state/codec.h"

namespace dispatch::sim {
namespace {

// Runs `fn` on the Update that `bytes` hold (a journal record).
template <typename Fn>
void WithUpdate(const std::string& bytes, Fn&& fn) {
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::copy(bytes.begin(), bytes.end(), words.asChars().begin());
  capnp::FlatArrayMessageReader reader(words);
  fn(reader.getRoot<journal::Update>());
}

}  // namespace

Result<uint64_t> SimJournal::Commit(const JournalBatch& batch) {
  for (const std::string& bytes : batch.records()) {
    if (bytes.size() > max_record_bytes()) {
      return InvalidArgumentError("a journal record of " + std::to_string(bytes.size()) +
                                  " bytes passes the limit");
    }
  }
  for (const std::string& bytes : batch.records()) {
    WithUpdate(bytes, [&](journal::Update::Reader update) {
      ctx_.observer->BeforeCommit(committed_, update);
      Status applied = committed_.Apply(update);
      if (!applied.ok()) {
        ctx_.observer->Fail("a journaled record does not apply to the committed state: " +
                            applied.ToString());
        return;
      }
      ctx_.observer->AfterCommit(committed_, update);
    });
    records_.push_back(bytes);
  }
  // As the Store: every put, then every delete, in the same transaction.
  for (const ResultPut& put : batch.result_puts()) results_[put.closure_id] = put.bytes;
  for (uint64_t id : batch.result_deletes()) results_.erase(id);
  const uint64_t every = ctx_.params.snapshot_every;
  if (every > 0 && records_.size() - snapshot_at_ >= every) {
    snapshot_ = state::EncodeSnapshot(committed_);
    snapshot_at_ = records_.size();
  }
  return records_.size();
}

const std::string* SimJournal::FindResult(uint64_t closure_id) const {
  auto row = results_.find(closure_id);
  return row == results_.end() ? nullptr : &row->second;
}

void SimJournal::CheckReplay() const {
  state::DispatcherState replayed;
  for (size_t i = 0; i < records_.size(); ++i) {
    Status applied = state::ApplyEncodedUpdate(replayed, records_[i]);
    if (!applied.ok()) {
      ctx_.observer->Fail("journal record " + std::to_string(i) +
                          " does not replay: " + applied.ToString());
      return;
    }
  }
  if (replayed.Digest() != committed_.Digest())
    ctx_.observer->Fail("replaying the journal gives another digest");
  if (snapshot_.empty()) return;
  Result<state::DispatcherState> restored = state::DecodeSnapshot(snapshot_);
  if (!restored.ok()) {
    ctx_.observer->Fail("the snapshot does not decode: " + restored.status().ToString());
    return;
  }
  for (size_t i = snapshot_at_; i < records_.size(); ++i) {
    Status applied = state::ApplyEncodedUpdate(*restored, records_[i]);
    if (!applied.ok()) {
      ctx_.observer->Fail("journal record " + std::to_string(i) +
                          " does not replay after the snapshot: " + applied.ToString());
      return;
    }
  }
  if (restored->Digest() != committed_.Digest())
    ctx_.observer->Fail("the snapshot and its tail give another digest");
}

}  // namespace dispatch::sim
