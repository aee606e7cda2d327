// SimJournal: the simulation's disk. The real CommitPipeline writes each
// group commit through it (storage::JournalWriter); what it holds survives a
// simulated crash, and what the pipeline had not committed yet (its batch)
// is lost with the process, as a SQLite transaction never begun would be.
// It applies every record, decoded from its bytes, to a replica of the
// committed state (the observer checks each transition), keeps the result
// table and a snapshot every `snapshot_every` records, and checks that the
// journal replays, from the empty state and from the snapshot, to the
// replica's digest. SimClock: the simulated network's time as the Clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "reactor/clock.h"
#include "state/dispatcher_state.h"
#include "storage/journal_writer.h"
#include "tests/sim/sim_context.h"

namespace dispatch::sim {

class SimJournal final : public storage::JournalWriter {
 public:
  explicit SimJournal(SimContext& ctx) : ctx_(ctx) {}

  Result<uint64_t> Commit(const JournalBatch& batch) override;
  uint64_t last_seq() const override { return records_.size(); }
  bool failed() const override { return false; }
  // StoreOptions' default.
  size_t max_record_bytes() const override { return 16u << 20; }

  // The journal applied: the state a restart recovers.
  const state::DispatcherState& committed() const { return committed_; }
  size_t size() const { return records_.size(); }
  // The committed result of `closure_id`; null when the table has none.
  const std::string* FindResult(uint64_t closure_id) const;
  // Replays the journal from the empty state and from the snapshot; both
  // must give the committed state's digest.
  void CheckReplay() const;

 private:
  SimContext& ctx_;
  state::DispatcherState committed_;
  std::vector<std::string> records_;
  std::map<uint64_t, std::string> results_;  // the result table
  std::string snapshot_;
  size_t snapshot_at_ = 0;  // records the snapshot covers
};

class SimClock final : public reactor::Clock {
 public:
  explicit SimClock(const SimNetwork& net) : net_(net) {}
  int64_t WallMicros() const override { return net_.now_ms() * 1000; }
  uint64_t MonotonicNanos() const override {
    return static_cast<uint64_t>(net_.now_ms()) * 1000000u;
  }

 private:
  const SimNetwork& net_;
};

}  // namespace dispatch::sim
