#include "tests/state/update_builders.h"

#include <capnp/schema.h>
#include <capnp/serialize.h>

#include "state/bytes.h"

namespace dispatch::state::testing {

OwnedUpdate::OwnedUpdate()
    : message_(std::make_unique<capnp::MallocMessageBuilder>()),
      root_(message_->initRoot<journal::Update>()) {}

OwnedUpdate OwnedUpdate::At(int64_t time_micros) && {
  root_.setTimeMicros(time_micros);
  return std::move(*this);
}

std::string OwnedUpdate::ToBytes() const {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(*message_);
  kj::ArrayPtr<const char> chars = words.asChars();
  return std::string(chars.begin(), chars.size());
}

OwnedUpdate OwnedUpdate::FromBytes(const std::string& bytes) {
  // Copy into word-aligned memory before reading.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  memcpy(words.begin(), bytes.data(), words.size() * sizeof(capnp::word));
  capnp::FlatArrayMessageReader reader(words);
  OwnedUpdate out;
  out.message_->setRoot(reader.getRoot<journal::Update>());
  out.root_ = out.message_->getRoot<journal::Update>();
  return out;
}

OwnedUpdate RegisterDataset(uint64_t dataset_id, uint64_t fingerprint, std::string definition_key,
                            std::string metadata, const std::string& kind) {
  OwnedUpdate u;
  auto r = u.builder().initRegisterDataset();
  r.setDatasetId(dataset_id);
  r.setFingerprint(fingerprint);
  if (definition_key.empty()) definition_key = "dataset-" + std::to_string(dataset_id);
  r.setDefinitionKey(AsText(definition_key));
  r.setMetadata(AsData(metadata));
  if (!kind.empty()) r.setKind(AsText(kind));
  return u;
}

OwnedUpdate SetElementSpec(uint64_t dataset_id, const std::string& element_spec) {
  OwnedUpdate u;
  auto r = u.builder().initSetElementSpec();
  r.setDatasetId(dataset_id);
  r.setElementSpec(AsData(element_spec));
  return u;
}

OwnedUpdate RegisterWorker(uint64_t worker_id, const std::string& address,
                           const std::string& transfer_address,
                           const std::vector<std::string>& tags, uint64_t incarnation,
                           const std::vector<std::string>& dataset_kinds) {
  OwnedUpdate u;
  auto r = u.builder().initRegisterWorker();
  r.setWorkerId(worker_id);
  r.setAddress(AsText(address));
  r.setTransferAddress(AsText(transfer_address));
  auto list = r.initTags(tags.size());
  for (unsigned i = 0; i < tags.size(); ++i) list.set(i, AsText(tags[i]));
  r.setIncarnation(incarnation);
  if (!dataset_kinds.empty()) {
    auto kinds = r.initDatasetKinds(dataset_kinds.size());
    for (unsigned i = 0; i < dataset_kinds.size(); ++i) kinds.set(i, AsText(dataset_kinds[i]));
  }
  return u;
}

OwnedUpdate RemoveWorker(uint64_t worker_id) {
  OwnedUpdate u;
  u.builder().initRemoveWorker().setWorkerId(worker_id);
  return u;
}

OwnedUpdate CreateJob(uint64_t job_id, uint64_t dataset_id, const JobOptions& options) {
  OwnedUpdate u;
  auto r = u.builder().initCreateJob();
  r.setJobId(job_id);
  r.setDatasetId(dataset_id);
  r.setProcessingMode(options.mode);
  if (options.name.has_value()) {
    auto key = r.getNamedKey().initNamed();
    key.setName(AsText(options.name->name));
    key.setIndex(options.name->index);
  } else {
    r.getNamedKey().setAnonymous();
  }
  r.setNumConsumers(options.num_consumers);
  r.setTargetWorkers(options.target_workers);
  r.setNumSplitProviders(options.num_split_providers);
  r.setRequeueUnfinishedSplits(options.requeue_unfinished_splits);
  return u;
}

OwnedUpdate ProduceSplit(uint64_t job_id, int64_t repetition, uint32_t provider, uint64_t task_id,
                         uint64_t sequence, const std::vector<uint64_t>& split_indices,
                         bool end_of_splits) {
  OwnedUpdate u;
  auto r = u.builder().initProduceSplit();
  r.setJobId(job_id);
  r.setRepetition(repetition);
  r.setProviderIndex(provider);
  r.setTaskId(task_id);
  r.setSequence(sequence);
  auto list = r.initSplitIndices(split_indices.size());
  for (unsigned i = 0; i < split_indices.size(); ++i) list.set(i, split_indices[i]);
  r.setEndOfSplits(end_of_splits);
  return u;
}

OwnedUpdate AcquireJobClient(uint64_t job_client_id, uint64_t job_id) {
  OwnedUpdate u;
  auto r = u.builder().initAcquireJobClient();
  r.setJobClientId(job_client_id);
  r.setJobId(job_id);
  return u;
}

OwnedUpdate ReleaseJobClient(uint64_t job_client_id) {
  OwnedUpdate u;
  u.builder().initReleaseJobClient().setJobClientId(job_client_id);
  return u;
}

OwnedUpdate GarbageCollectJob(uint64_t job_id) {
  OwnedUpdate u;
  u.builder().initGarbageCollectJob().setJobId(job_id);
  return u;
}

OwnedUpdate CreateTask(uint64_t task_id, uint64_t job_id, const std::string& worker_address) {
  OwnedUpdate u;
  auto r = u.builder().initCreateTask();
  r.setTaskId(task_id);
  r.setJobId(job_id);
  r.setWorkerAddress(AsText(worker_address));
  return u;
}

OwnedUpdate CreatePendingTask(uint64_t task_id, uint64_t job_id, const std::string& worker_address,
                              int64_t starting_round) {
  OwnedUpdate u;
  auto r = u.builder().initCreatePendingTask();
  r.setTaskId(task_id);
  r.setJobId(job_id);
  r.setWorkerAddress(AsText(worker_address));
  r.setStartingRound(starting_round);
  return u;
}

OwnedUpdate AcceptPendingTask(uint64_t job_client_id, uint64_t task_id) {
  OwnedUpdate u;
  auto r = u.builder().initClientHeartbeat();
  r.setJobClientId(job_client_id);
  r.setTaskId(task_id);
  r.getOutcome().setAccepted();
  return u;
}

OwnedUpdate RejectPendingTask(uint64_t job_client_id, uint64_t task_id, int64_t new_target_round) {
  OwnedUpdate u;
  auto r = u.builder().initClientHeartbeat();
  r.setJobClientId(job_client_id);
  r.setTaskId(task_id);
  r.getOutcome().setRejected(new_target_round);
  return u;
}

OwnedUpdate RemoveTask(uint64_t task_id) {
  OwnedUpdate u;
  u.builder().initRemoveTask().setTaskId(task_id);
  return u;
}

OwnedUpdate FinishTask(uint64_t task_id) {
  OwnedUpdate u;
  u.builder().initFinishTask().setTaskId(task_id);
  return u;
}

OwnedUpdate HandOverTask(uint64_t task_id) {
  OwnedUpdate u;
  u.builder().initHandOverTask().setTaskId(task_id);
  return u;
}

// The single-closure builders make closure batches of one item: the only
// form a closure's schedule, assignment and finish take in the journal.
OwnedUpdate ScheduleClosure(uint64_t closure_id, uint64_t coordinator_id,
                            const std::string& function_name, const std::string& args,
                            uint64_t request_id, const std::vector<uint64_t>& resources,
                            int32_t priority, int64_t deadline_micros,
                            const std::vector<uint64_t>& inputs) {
  OwnedUpdate u;
  auto r = u.builder().initClosureBatch().initScheduled(1)[0];
  r.setClosureId(closure_id);
  r.setCoordinatorId(coordinator_id);
  r.setFunctionName(AsText(function_name));
  r.setArgs(AsData(args));
  r.setRequestId(request_id);
  auto list = r.initResources(static_cast<unsigned>(resources.size()));
  for (size_t i = 0; i < resources.size(); ++i) list.set(static_cast<unsigned>(i), resources[i]);
  r.setPriority(priority);
  r.setDeadlineMicros(deadline_micros);
  auto in = r.initInputs(static_cast<unsigned>(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) in.set(static_cast<unsigned>(i), inputs[i]);
  return u;
}

OwnedUpdate ScheduleClosureAfter(uint64_t closure_id, uint64_t coordinator_id,
                                 const std::string& function_name, const std::string& args,
                                 uint64_t request_id, const std::vector<uint64_t>& resources,
                                 const std::vector<uint64_t>& inputs) {
  return ScheduleClosure(closure_id, coordinator_id, function_name, args, request_id, resources, 0,
                         0, inputs);
}

OwnedUpdate AssignClosure(uint64_t closure_id, uint64_t worker_id, uint32_t attempt) {
  return AssignClosures({{closure_id, worker_id, attempt}});
}

OwnedUpdate FinishClosure(uint64_t closure_id, uint64_t worker_id, uint32_t attempt,
                          const std::string& result) {
  OwnedUpdate u;
  auto r = u.builder().initClosureBatch().initFinished(1)[0];
  r.setClosureId(closure_id);
  r.setWorkerId(worker_id);
  r.setAttempt(attempt);
  r.setResult(AsData(result));
  return u;
}

OwnedUpdate FinishClosureStored(uint64_t closure_id, uint64_t worker_id, uint32_t attempt,
                                uint64_t size, uint32_t crc) {
  OwnedUpdate u;
  auto r = u.builder().initClosureBatch().initFinished(1)[0];
  r.setClosureId(closure_id);
  r.setWorkerId(worker_id);
  r.setAttempt(attempt);
  r.setResultStored(true);
  r.setResultSize(size);
  r.setResultCrc(crc);
  return u;
}

OwnedUpdate FailClosure(uint64_t closure_id, uint64_t worker_id, uint32_t attempt,
                        const std::string& error, bool user_error, bool infrastructure,
                        bool deadline_exceeded) {
  OwnedUpdate u;
  auto r = u.builder().initClosureFailed();
  r.setClosureId(closure_id);
  r.setWorkerId(worker_id);
  r.setAttempt(attempt);
  r.setError(AsText(error));
  r.setUserError(user_error);
  r.setInfrastructure(infrastructure);
  r.setDeadlineExceeded(deadline_exceeded);
  return u;
}

OwnedUpdate PutBackClosure(uint64_t closure_id, uint64_t worker_id, uint32_t attempt,
                           bool transient) {
  OwnedUpdate u;
  auto r = u.builder().initClosurePutBack();
  r.setClosureId(closure_id);
  r.setWorkerId(worker_id);
  r.setAttempt(attempt);
  r.setTransient(transient);
  return u;
}

OwnedUpdate CreateResource(uint64_t resource_id, uint64_t coordinator_id,
                           const std::string& function_name, const std::string& args,
                           uint64_t request_id) {
  OwnedUpdate u;
  auto r = u.builder().initResourceCreated();
  r.setResourceId(resource_id);
  r.setCoordinatorId(coordinator_id);
  r.setFunctionName(AsText(function_name));
  r.setArgs(AsData(args));
  r.setRequestId(request_id);
  return u;
}

OwnedUpdate ScheduleClosures(const std::vector<uint64_t>& ids, uint64_t coordinator_id,
                             const std::vector<uint64_t>& request_ids,
                             const std::vector<std::vector<uint64_t>>& inputs) {
  OwnedUpdate u;
  auto list = u.builder().initClosureBatch().initScheduled(static_cast<unsigned>(ids.size()));
  for (unsigned i = 0; i < ids.size(); ++i) {
    list[i].setClosureId(ids[i]);
    list[i].setCoordinatorId(coordinator_id);
    list[i].setFunctionName("noop");
    if (i < request_ids.size()) list[i].setRequestId(request_ids[i]);
    if (i < inputs.size()) {
      auto in = list[i].initInputs(static_cast<unsigned>(inputs[i].size()));
      for (unsigned j = 0; j < inputs[i].size(); ++j) in.set(j, inputs[i][j]);
    }
  }
  return u;
}

OwnedUpdate AssignClosures(const std::vector<ClosureRef>& refs) {
  OwnedUpdate u;
  auto list = u.builder().initClosureBatch().initAssigned(static_cast<unsigned>(refs.size()));
  for (unsigned i = 0; i < refs.size(); ++i) {
    list[i].setClosureId(refs[i].closure_id);
    list[i].setWorkerId(refs[i].worker_id);
    list[i].setAttempt(refs[i].attempt);
  }
  return u;
}

OwnedUpdate FinishClosures(const std::vector<ClosureRef>& refs) {
  OwnedUpdate u;
  auto list = u.builder().initClosureBatch().initFinished(static_cast<unsigned>(refs.size()));
  for (unsigned i = 0; i < refs.size(); ++i) {
    list[i].setClosureId(refs[i].closure_id);
    list[i].setWorkerId(refs[i].worker_id);
    list[i].setAttempt(refs[i].attempt);
    list[i].setResult(AsData("result-" + std::to_string(refs[i].closure_id)));
  }
  return u;
}

namespace {
void FillIds(capnp::List<uint64_t>::Builder list, const std::vector<uint64_t>& ids) {
  for (unsigned i = 0; i < ids.size(); ++i) list.set(i, ids[i]);
}
}  // namespace

OwnedUpdate CancelClosures(const std::vector<uint64_t>& ids) {
  OwnedUpdate u;
  FillIds(u.builder().initClosureBatch().initCancelled(static_cast<unsigned>(ids.size())), ids);
  return u;
}

OwnedUpdate ReleaseClosures(const std::vector<uint64_t>& ids) {
  OwnedUpdate u;
  FillIds(u.builder().initClosureBatch().initReleased(static_cast<unsigned>(ids.size())), ids);
  return u;
}

OwnedUpdate CancelClosure(uint64_t closure_id) { return CancelClosures({closure_id}); }

OwnedUpdate ReleaseClosure(uint64_t closure_id) { return ReleaseClosures({closure_id}); }

OwnedUpdate ClearCoordinatorError(uint64_t coordinator_id) {
  OwnedUpdate u;
  u.builder().initCoordinatorErrorCleared().setCoordinatorId(coordinator_id);
  return u;
}

namespace {

// A closure batch of `kind` from its builder; every kind is named (no
// default), so a new kind of batch does not compile without one.
OwnedUpdate BatchExample(journal::ClosureBatch::Which kind) {
  switch (kind) {
    case journal::ClosureBatch::SCHEDULED:
      return ScheduleClosures({7, 8}, 3, {21, 22});
    case journal::ClosureBatch::ASSIGNED:
      return AssignClosures({{7, 2, 1}});
    case journal::ClosureBatch::FINISHED:
      return FinishClosures({{7, 2, 1}});
    case journal::ClosureBatch::CANCELLED:
      return CancelClosures({7});
    case journal::ClosureBatch::RELEASED:
      return ReleaseClosures({7});
  }
  return OwnedUpdate();
}

}  // namespace

std::vector<OwnedUpdate> BuilderExamples(journal::Update::Which which) {
  std::vector<OwnedUpdate> out;
  switch (which) {
    case journal::Update::INVALID:
      break;  // no builder makes the always-rejected variant
    case journal::Update::REGISTER_DATASET:
      out.push_back(RegisterDataset(5, 55, "key-5", "meta"));
      out.push_back(RegisterDataset(6, 66, "key-6", "meta", "python"));
      break;
    case journal::Update::SET_ELEMENT_SPEC:
      out.push_back(SetElementSpec(5, "spec"));
      break;
    case journal::Update::REGISTER_WORKER:
      out.push_back(RegisterWorker(2, "w:1", "x:1", {"gpu"}, 9));
      out.push_back(RegisterWorker(3, "w:2", "x:2", {}, 7, {"python", "range"}));
      break;
    case journal::Update::REMOVE_WORKER:
      out.push_back(RemoveWorker(2));
      break;
    case journal::Update::CREATE_JOB: {
      JobOptions options;
      options.mode = ProcessingMode::DYNAMIC;
      options.name = NamedJobKey{"train", 1};
      options.num_consumers = 2;
      options.target_workers = TargetWorkers::LOCAL;
      options.num_split_providers = 2;
      options.requeue_unfinished_splits = true;
      out.push_back(CreateJob(4, 5, options));
      out.push_back(CreateJob(6, 5));  // anonymous
      break;
    }
    case journal::Update::PRODUCE_SPLIT:
      out.push_back(ProduceSplit(4, 1, 1, 3, 2, {0, 1}, true));
      break;
    case journal::Update::ACQUIRE_JOB_CLIENT:
      out.push_back(AcquireJobClient(8, 4));
      break;
    case journal::Update::RELEASE_JOB_CLIENT:
      out.push_back(ReleaseJobClient(8));
      break;
    case journal::Update::GARBAGE_COLLECT_JOB:
      out.push_back(GarbageCollectJob(4));
      break;
    case journal::Update::CREATE_TASK:
      out.push_back(CreateTask(3, 4, "w:1"));
      break;
    case journal::Update::CREATE_PENDING_TASK:
      out.push_back(CreatePendingTask(3, 4, "w:1", 2));
      break;
    case journal::Update::CLIENT_HEARTBEAT:
      out.push_back(AcceptPendingTask(8, 3));
      out.push_back(RejectPendingTask(8, 3, 4));
      break;
    case journal::Update::REMOVE_TASK:
      out.push_back(RemoveTask(3));
      break;
    case journal::Update::FINISH_TASK:
      out.push_back(FinishTask(3));
      break;
    case journal::Update::HAND_OVER_TASK:
      out.push_back(HandOverTask(3));
      break;
    case journal::Update::RETIRED_CLOSURE_SCHEDULED:
    case journal::Update::RETIRED_CLOSURE_ASSIGNED:
    case journal::Update::RETIRED_CLOSURE_FINISHED:
    case journal::Update::RETIRED_CLOSURE_CANCELLED:
    case journal::Update::RETIRED_CLOSURE_RELEASED:
      break;  // Void: nothing to build
    case journal::Update::CLOSURE_FAILED:
      out.push_back(FailClosure(7, 2, 1, "boom", true));
      out.push_back(FailClosure(7, 2, 1, "worker lost", false, true));
      out.push_back(FailClosure(7, 0, 1, "deadline exceeded", false, false, true));
      break;
    case journal::Update::CLOSURE_PUT_BACK:
      out.push_back(PutBackClosure(7, 2, 1, true));
      break;
    case journal::Update::COORDINATOR_ERROR_CLEARED:
      out.push_back(ClearCoordinatorError(3));
      break;
    case journal::Update::RESOURCE_CREATED:
      out.push_back(CreateResource(1, 3, "make", "args", 4));
      break;
    case journal::Update::CLOSURE_BATCH:
      for (capnp::StructSchema::Field kind :
           capnp::Schema::from<journal::ClosureBatch>().getUnionFields()) {
        out.push_back(BatchExample(
            static_cast<journal::ClosureBatch::Which>(kind.getProto().getDiscriminantValue())));
      }
      // Batches of one, as a single closure's changes are journaled.
      out.push_back(ScheduleClosure(7, 3, "fn", "args", 21, {1}, 0, 0, {5}));
      out.push_back(ScheduleClosure(8, 3, "fn", "args", 22, {}, -5, 9'000'000));
      out.push_back(AssignClosure(7, 2, 1));
      out.push_back(FinishClosure(7, 2, 1, "result"));
      out.push_back(FinishClosureStored(7, 2, 1, 6, 0xc0ffee));
      out.push_back(CancelClosure(7));
      out.push_back(ReleaseClosure(7));
      break;
  }
  for (OwnedUpdate& update : out) update.builder().setTimeMicros(1000);
  return out;
}

const char* VariantName(journal::Update::Which which) {
  for (capnp::StructSchema::Field field : capnp::Schema::from<journal::Update>().getUnionFields()) {
    if (field.getProto().getDiscriminantValue() == static_cast<uint16_t>(which)) {
      return field.getProto().getName().cStr();
    }
  }
  return "unknown";
}

std::vector<journal::Update::Which> AllTransitionVariants() {
  std::vector<journal::Update::Which> out;
  for (capnp::StructSchema::Field field : capnp::Schema::from<journal::Update>().getUnionFields()) {
    // `invalid` and the retired variants are Void: no transition.
    if (field.getType().isVoid()) continue;
    out.push_back(static_cast<journal::Update::Which>(field.getProto().getDiscriminantValue()));
  }
  return out;
}

std::set<std::string> NoTransitionMembers() {
  std::set<std::string> out;
  for (capnp::StructSchema::Field field : capnp::Schema::from<journal::Update>().getUnionFields()) {
    if (field.getType().isVoid()) out.insert("Update." + std::string(field.getProto().getName()));
  }
  return out;
}

}  // namespace dispatch::state::testing
