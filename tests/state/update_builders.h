// Small builders of journal::Update messages for tests (state, storage,
// reactor). Each returns an OwnedUpdate: one Update in its own message, with
// time 0 unless set with At(). Ids, addresses and names are the caller's.
#pragma once

#include <capnp/message.h>
#include <kj/array.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "schema/journal.capnp.h"
#include "state/records.h"

namespace dispatch::state::testing {

class OwnedUpdate {
 public:
  OwnedUpdate();  // an empty message: the always-rejected `invalid` variant
  OwnedUpdate(OwnedUpdate&&) = default;
  OwnedUpdate& operator=(OwnedUpdate&&) = default;

  journal::Update::Builder builder() { return root_; }
  journal::Update::Reader reader() const { return root_.asReader(); }
  // Sets the update's time and hands the update on: `FinishTask(3).At(10)`.
  OwnedUpdate At(int64_t time_micros) &&;
  // The message as flat bytes (what the journal stores) and back.
  std::string ToBytes() const;
  static OwnedUpdate FromBytes(const std::string& bytes);

 private:
  std::unique_ptr<capnp::MallocMessageBuilder> message_;
  journal::Update::Builder root_;
};

struct JobOptions {
  ProcessingMode mode = ProcessingMode::OFF;
  std::optional<NamedJobKey> name;
  uint32_t num_consumers = 0;
  TargetWorkers target_workers = TargetWorkers::AUTO;
  uint32_t num_split_providers = 0;  // set to >= 1 with DYNAMIC
  bool requeue_unfinished_splits = false;
};

// Data service. `definition_key` defaults to "dataset-<id>"; `kind` empty:
// the dataset has none.
OwnedUpdate RegisterDataset(uint64_t dataset_id, uint64_t fingerprint,
                            std::string definition_key = "", std::string metadata = "",
                            const std::string& kind = "");
OwnedUpdate SetElementSpec(uint64_t dataset_id, const std::string& element_spec);
// `dataset_kinds` empty: the worker announced none.
OwnedUpdate RegisterWorker(uint64_t worker_id, const std::string& address,
                           const std::string& transfer_address = "",
                           const std::vector<std::string>& tags = {}, uint64_t incarnation = 1,
                           const std::vector<std::string>& dataset_kinds = {});
OwnedUpdate RemoveWorker(uint64_t worker_id);
OwnedUpdate CreateJob(uint64_t job_id, uint64_t dataset_id, const JobOptions& options = {});
OwnedUpdate ProduceSplit(uint64_t job_id, int64_t repetition, uint32_t provider, uint64_t task_id,
                         uint64_t sequence, const std::vector<uint64_t>& split_indices,
                         bool end_of_splits = false);
OwnedUpdate AcquireJobClient(uint64_t job_client_id, uint64_t job_id);
OwnedUpdate ReleaseJobClient(uint64_t job_client_id);
OwnedUpdate GarbageCollectJob(uint64_t job_id);
OwnedUpdate CreateTask(uint64_t task_id, uint64_t job_id, const std::string& worker_address);
OwnedUpdate CreatePendingTask(uint64_t task_id, uint64_t job_id, const std::string& worker_address,
                              int64_t starting_round);
OwnedUpdate AcceptPendingTask(uint64_t job_client_id, uint64_t task_id);
OwnedUpdate RejectPendingTask(uint64_t job_client_id, uint64_t task_id, int64_t new_target_round);
OwnedUpdate RemoveTask(uint64_t task_id);
OwnedUpdate FinishTask(uint64_t task_id);
OwnedUpdate HandOverTask(uint64_t task_id);

// Closures. Schedule, assign, finish, cancel and release of one closure are
// closure batches of one item.
OwnedUpdate ScheduleClosure(uint64_t closure_id, uint64_t coordinator_id,
                            const std::string& function_name = "noop", const std::string& args = "",
                            uint64_t request_id = 0, const std::vector<uint64_t>& resources = {},
                            int32_t priority = 0, int64_t deadline_micros = 0,
                            const std::vector<uint64_t>& inputs = {});
// The same with inputs (ClosureScheduled.inputs), default priority, no deadline.
OwnedUpdate ScheduleClosureAfter(uint64_t closure_id, uint64_t coordinator_id,
                                 const std::string& function_name, const std::string& args,
                                 uint64_t request_id, const std::vector<uint64_t>& resources,
                                 const std::vector<uint64_t>& inputs);
OwnedUpdate AssignClosure(uint64_t closure_id, uint64_t worker_id, uint32_t attempt);
OwnedUpdate FinishClosure(uint64_t closure_id, uint64_t worker_id, uint32_t attempt,
                          const std::string& result);
// Finished with a result kept in storage's result table: the update carries
// only its size and checksum.
OwnedUpdate FinishClosureStored(uint64_t closure_id, uint64_t worker_id, uint32_t attempt,
                                uint64_t size, uint32_t crc);
OwnedUpdate FailClosure(uint64_t closure_id, uint64_t worker_id, uint32_t attempt,
                        const std::string& error, bool user_error = true,
                        bool infrastructure = false, bool deadline_exceeded = false);
OwnedUpdate CancelClosure(uint64_t closure_id);
OwnedUpdate PutBackClosure(uint64_t closure_id, uint64_t worker_id, uint32_t attempt,
                           bool transient = false);
OwnedUpdate ReleaseClosure(uint64_t closure_id);
OwnedUpdate ClearCoordinatorError(uint64_t coordinator_id);
OwnedUpdate CreateResource(uint64_t resource_id, uint64_t coordinator_id,
                           const std::string& function_name = "make", const std::string& args = "",
                           uint64_t request_id = 0);

// Closure batches (one record, many closures of one kind).
struct ClosureRef {
  uint64_t closure_id = 0;
  uint64_t worker_id = 0;
  uint32_t attempt = 0;
};
// Closures `ids` of `coordinator_id` running "noop"; request ids when given
// (same length as ids).
// `inputs[i]`, when given, are item i's input closures.
OwnedUpdate ScheduleClosures(const std::vector<uint64_t>& ids, uint64_t coordinator_id,
                             const std::vector<uint64_t>& request_ids = {},
                             const std::vector<std::vector<uint64_t>>& inputs = {});
OwnedUpdate AssignClosures(const std::vector<ClosureRef>& refs);
// Each result is "result-<closure id>".
OwnedUpdate FinishClosures(const std::vector<ClosureRef>& refs);
OwnedUpdate CancelClosures(const std::vector<uint64_t>& ids);
OwnedUpdate ReleaseClosures(const std::vector<uint64_t>& ids);

// Updates of `which` made with the builders above that together set every
// field of the variant to a non-default value and take every member of its
// nested unions (each batch kind, both heartbeat outcomes, a named and an
// anonymous job). Their ids refer to nothing: they are for encoding and
// schema-coverage tests, not for a state. Empty for `invalid`. The switch
// behind it names every variant, so a variant without a builder does not
// compile (-Werror=switch).
std::vector<OwnedUpdate> BuilderExamples(journal::Update::Which which);

// A short name of the update's variant ("createJob"), for messages and counts.
const char* VariantName(journal::Update::Which which);
// Every variant but `invalid` and the retired ones, in schema order.
std::vector<journal::Update::Which> AllTransitionVariants();
// The Update members no record may hold, "Update.<name>" as SchemaCoverage
// names them: `invalid` and the retired ones (Void, refused on apply).
std::set<std::string> NoTransitionMembers();

}  // namespace dispatch::state::testing
