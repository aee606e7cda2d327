// Closure Updates: the one place the closure transitions are put together as
// journal::Updates, for the planner's decisions (closure_planner.h) and the
// reactor's handlers alike. List-shaped transitions are cut into as many
// ClosureBatch records as the journal's per-record limit needs
// (record_budget.h), in order. Pure: the time and the limit come in a Stamp.
#pragma once

#include <capnp/list.h>
#include <capnp/message.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/closure_limits.h"
#include "schema/journal.capnp.h"

namespace dispatch::state {

// Updates to submit in order, each in its own message. Each is valid against
// the state its predecessors leave (a planner builds them so).
class UpdateList {
 public:
  UpdateList() = default;
  UpdateList(UpdateList&&) = default;
  UpdateList& operator=(UpdateList&&) = default;
  UpdateList(const UpdateList&) = delete;
  UpdateList& operator=(const UpdateList&) = delete;

  // A new empty Update at the end, with its time set. `words`: what the
  // finished record will take (record_budget.h), so that its message is one
  // segment of that size (0: a default first segment that grows).
  journal::Update::Builder Add(int64_t time_micros, uint64_t words = 0);
  void Append(UpdateList&& other);
  size_t size() const { return messages_.size(); }
  bool empty() const { return messages_.empty(); }
  journal::Update::Reader operator[](size_t i) const;
  // The journal bytes of update i (EncodeMessage of its own message) when
  // that message is one segment, which it is unless it is large: a copy, no
  // traversal. nullopt otherwise (encode the reader: that compacts it).
  std::optional<std::string> EncodedIfOneSegment(size_t i) const;

 private:
  std::vector<std::unique_ptr<capnp::MallocMessageBuilder>> messages_;
};

// What every built Update carries and obeys: the reactor's one clock, and the
// journal's per-record limit (StoreOptions.max_record_bytes).
struct Stamp {
  int64_t time_micros = 0;
  size_t max_record_bytes = 16u << 20;
};

// A closure's inputs and resources (ClosureSpec or ClosureScheduled), read
// only when present: most closures have neither, and testing for a list is an
// inline pointer check where reading one, even empty, is a call into libcapnp.
template <typename Item>
capnp::List<uint64_t>::Reader InputsOf(Item closure) {
  return closure.hasInputs() ? closure.getInputs() : capnp::List<uint64_t>::Reader();
}
template <typename Item>
capnp::List<uint64_t>::Reader ResourcesOf(Item closure) {
  return closure.hasResources() ? closure.getResources() : capnp::List<uint64_t>::Reader();
}

// One closure of a schedule, its fields as the caller read them (each once:
// a schedule near the message limit can be traversed only once).
struct NewClosure {
  uint64_t closure_id = 0;
  capnp::Text::Reader function;
  capnp::Data::Reader args;
  capnp::List<uint64_t>::Reader resources;
  uint64_t request_id = 0;
  int32_t priority = 0;
  uint32_t timeout_ms = 0;      // as asked (0: none); PlanSchedule turns it into the deadline
  int64_t deadline_micros = 0;  // what the record carries (0: none)
  // Input closures (ClosureSpec.inputs): as the request has them (an entry
  // >= kInputInCall is an index into the request), then, in a plan, ids.
  std::vector<uint64_t> inputs = {};
};


// (closure, worker, attempt): an assignment, or the run a report is about.
struct ClosureRun {
  uint64_t closure_id = 0;
  uint64_t worker_id = 0;
  uint32_t attempt = 0;
};

// A result kept in storage's result table: the record holds its size and CRC32C.
struct StoredResult {
  ClosureRun run;
  uint64_t size = 0;
  uint32_t crc = 0;
};

// Items of a `finished` record (about 40 bytes each: a record stays small
// however long a worker's report list is).
inline constexpr size_t kMaxFinishedPerRecord = 8192;

// Appends the records of each transition to `out`. `closures` of a schedule
// have increasing ids.
void AddScheduled(UpdateList& out, const Stamp& stamp, uint64_t coordinator_id,
                  const std::vector<NewClosure>& closures);
void AddAssigned(UpdateList& out, const Stamp& stamp, const std::vector<ClosureRun>& runs);
void AddFinished(UpdateList& out, const Stamp& stamp, const std::vector<StoredResult>& results);
void AddCancelled(UpdateList& out, const Stamp& stamp, const std::vector<uint64_t>& closure_ids);
void AddReleased(UpdateList& out, const Stamp& stamp, const std::vector<uint64_t>& closure_ids);
// Why a closure failed, which decides how its failure counts (ClosureFailed
// in schema/journal.capnp).
enum class FailureKind {
  kUserError,        // the function raised it (or its result was over the limit)
  kTransientErrors,  // the function's transient errors passed the retry limit
  kInfrastructure,   // its workers failed it max_closure_attempts times: not the function's error
  kDeadlineExceeded,  // its deadline passed (the dispatcher fails it): not the first error
};
// `run.worker_id` 0: not running (queued).
void AddFailed(UpdateList& out, const Stamp& stamp, const ClosureRun& run, std::string_view error,
               FailureKind kind);
void AddPutBack(UpdateList& out, const Stamp& stamp, const ClosureRun& run, bool transient);
void AddResourceCreated(UpdateList& out, const Stamp& stamp, uint64_t resource_id,
                        uint64_t coordinator_id, std::string_view function, std::string_view args,
                        uint64_t request_id);
void AddErrorCleared(UpdateList& out, const Stamp& stamp, uint64_t coordinator_id);

}  // namespace dispatch::state
