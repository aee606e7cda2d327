@0xcf061f97774f430e;
# The journal record. Every change to the dispatcher's state is one Update:
# the reactor builds it (choosing ids from the state's next-id counters and the
# time from its one clock), state/ checks it, storage/ journals it, and
# state/ applies it. Replaying the journal through the same Apply rebuilds the
# state exactly. StateSnapshot is the whole state as one message.
#
# Compatibility: fields and variants are only ever added, never renumbered. A
# reader that meets a variant it does not know rejects the record.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("dispatch::journal");

# ---------------------------------------------------------------------------
# Enumerations shared by updates, snapshots and the wire protocol. They are
# defined in the wire schema (dispatcher.capnp), which must compile alone for
# clients in other languages; the journal depends on it, never the reverse.
# Their ordinals are the journal's too: they are only ever appended to.

using Wire = import "dispatcher.capnp";
using ProcessingMode = Wire.ProcessingMode;
using TargetWorkers = Wire.TargetWorkers;
using ClosureState = Wire.ClosureState;

# ---------------------------------------------------------------------------
# Data service transitions.

struct RegisterDataset {
  # Precondition: `datasetId` >= the next dataset id (never reused), nonzero and not 2^64-1;
  # no registered dataset has `fingerprint`; `definitionKey` is non-empty and
  # names no other dataset's definition.
  # Effect: adds the dataset; the next dataset id becomes `datasetId` + 1. The
  # definition bytes live in storage's dataset store under `definitionKey`,
  # written in the same transaction as this update.
  datasetId @0 :UInt64;
  fingerprint @1 :UInt64;
  metadata @2 :Data;         # opaque to the dispatcher (e.g. split source description)
  definitionKey @3 :Text;    # key of the definition bytes in the dataset store
  kind @4 :Text;
  # The dataset kind (the first word of the definition, see the wire's
  # getOrRegisterDataset): its jobs' tasks go only to workers that produce it.
  # Empty: no kind, every worker serves it (so are datasets registered before
  # this field).
}

struct SetElementSpec {
  # Precondition: dataset `datasetId` exists and has no element spec yet;
  # `elementSpec` is non-empty.
  # Effect: records the element spec of the dataset.
  datasetId @0 :UInt64;
  elementSpec @1 :Data;
}

struct RegisterWorker {
  # Precondition: `workerId` >= the next worker id, nonzero and not 2^64-1; `address` is
  # non-empty and no registered worker uses it.
  # Effect: adds the worker; the next worker id becomes `workerId` + 1. Tasks
  # still assigned to `address` (from an earlier registration at the same
  # address) belong to this worker again; the unfinished ones take its
  # `transferAddress`.
  workerId @0 :UInt64;
  address @1 :Text;
  transferAddress @2 :Text;
  tags @3 :List(Text);
  incarnation @4 :UInt64;    # chosen by the worker process at start; fences stale results
  datasetKinds @5 :List(Text);
  # The dataset kinds the worker produces, as its registering heartbeat
  # announced them. Empty: it announced none (so did every worker before this
  # field) and may be given a task of every job.
}

struct RemoveWorker {
  # Precondition: worker `workerId` is registered and runs no closure (the
  # reactor first puts back or fails each of its closures).
  # Effect: removes the worker and frees its address. Its tasks stay assigned to
  # the address, for a worker that registers there to take them, until a
  # HandOverTask finishes them (the grace period is the reactor's policy;
  # static sharding and round robin have none: they wait). For jobs created with
  # `requeueUnfinishedSplits`, the splits its tasks hold in the current
  # repetition go back to their provider's requeue list (at-least-once);
  # otherwise they are lost with the worker (at-most-once, as the reference).
  workerId @0 :UInt64;
}

struct NamedJobKey {
  name @0 :Text;
  index @1 :Int64;
}

struct CreateJob {
  # Precondition: `jobId` >= the next job id, nonzero and not 2^64-1; dataset `datasetId`
  # exists; when named, no job that is not garbage-collected holds the key;
  # `numSplitProviders` >= 1 exactly when `processingMode` is DYNAMIC;
  # `requeueUnfinishedSplits` only with DYNAMIC.
  # Effect: adds an unfinished job with no clients and no tasks, one split
  # provider progress record (repetition 0, index 0) per provider; a named job
  # becomes the holder of its key. The next job id becomes `jobId` + 1.
  jobId @0 :UInt64;
  datasetId @1 :UInt64;
  processingMode @2 :ProcessingMode;
  namedKey :union {
    anonymous @3 :Void;
    named @4 :NamedJobKey;
  }
  numConsumers @5 :UInt32;        # 0: no round robin; else round-robin consumers
  targetWorkers @6 :TargetWorkers;
  numSplitProviders @7 :UInt32;
  requeueUnfinishedSplits @8 :Bool;  # at-least-once splits when a worker dies
}

struct ProduceSplit {
  # Hands splits of one provider to one requester (a task), in order: each
  # listed index must be the front of the provider's requeue list when that
  # list is non-empty, else the provider's next index.
  # Precondition: job `jobId` exists, is DYNAMIC and not finished; it has split
  # provider `providerIndex`; `repetition` is that provider's current
  # repetition; task `taskId` belongs to the job; `sequence` is greater than the
  # last sequence this task used with this provider; when `endOfSplits`, the
  # requeue list is empty after the listed splits (no split is skipped: the
  # split source's end is the reactor's knowledge, the order is the state's).
  # Effect: advances the provider past the listed splits; with `endOfSplits`
  # the provider moves to the next repetition at index 0. Records
  # (task, provider) -> (sequence, repetition, splits, endOfSplits) so a retry
  # with the same sequence is answered from the state without a new update; the
  # listed splits are outstanding for the task until its next request for this
  # provider, the end of its task, its worker's removal or its hand-over. An empty
  # list without `endOfSplits` is a valid grant (the "none now, ask again" answer,
  # written for jobs that requeue while another task holds splits of the
  # repetition): it leaves the provider as it is and ends what the task held, as any
  # request does.
  jobId @0 :UInt64;
  repetition @1 :Int64;
  providerIndex @2 :UInt32;
  taskId @3 :UInt64;
  sequence @4 :UInt64;
  splitIndices @5 :List(UInt64);   # payloads follow from the dataset's split source by index
  endOfSplits @6 :Bool;
}

struct AcquireJobClient {
  # Precondition: `jobClientId` >= the next job client id, nonzero and not 2^64-1; job
  # `jobId` exists and is not garbage-collected.
  # Effect: adds the client; the job's client count grows by one. The next job
  # client id becomes `jobClientId` + 1.
  jobClientId @0 :UInt64;
  jobId @1 :UInt64;
}

struct ReleaseJobClient {
  # Precondition: job client `jobClientId` exists.
  # Effect: removes the client; its job's client count drops by one and the
  # job's last-release time becomes the update's time.
  jobClientId @0 :UInt64;
}

struct GarbageCollectJob {
  # Precondition: job `jobId` exists, is not finished, has no clients and has
  # had at least one client released (the GC timeout is the reactor's policy).
  # Effect: the job is garbage-collected and finished; every task of it is
  # finished; its pending tasks are dropped. Its named key may be reused.
  jobId @0 :UInt64;
}

struct CreateTask {
  # Precondition: `taskId` >= the next task id, nonzero and not 2^64-1; job `jobId` exists
  # and is not finished; a worker is registered at `workerAddress`; the job has
  # no task (active or pending) for that address; that worker can produce the
  # job's dataset (it announced no kinds, or the dataset has no kind, or the
  # worker's `datasetKinds` hold the dataset's `kind`).
  # Effect: adds an active task of the job on that worker, starting at round 0,
  # with the worker's transfer address. The next task id becomes `taskId` + 1.
  taskId @0 :UInt64;
  jobId @1 :UInt64;
  workerAddress @2 :Text;
}

struct CreatePendingTask {
  # Precondition: as CreateTask, and the job is round robin (numConsumers > 0).
  # Effect: adds a pending task: the worker sees it, consumers do not, until all
  # consumers accept it (see ClientHeartbeat). It joins the back of the job's
  # pending queue with target round `startingRound` and no failures.
  taskId @0 :UInt64;
  jobId @1 :UInt64;
  workerAddress @2 :Text;
  startingRound @3 :Int64;
}

struct ClientHeartbeat {
  # The outcome of a round-robin consumer's heartbeat for the front pending task.
  # Precondition: job client `jobClientId` exists; task `taskId` is the front of
  # its job's pending queue; for `accepted`, the client has not accepted this
  # task at its current target round; for `rejected`, `newTargetRound` exceeds
  # the task's current target round.
  # Effect: accepted: the client joins the task's ready set; when the set holds
  # numConsumers clients the task becomes active with starting round = target
  # round and leaves the queue. rejected: the target round becomes
  # `newTargetRound`, failures grow by one and the ready set empties.
  jobClientId @0 :UInt64;
  taskId @1 :UInt64;
  outcome :union {
    accepted @2 :Void;
    rejected @3 :Int64;   # the new target round
  }
}

struct RemoveTask {
  # Precondition: task `taskId` exists, is active (not pending) and its job is
  # round robin (all consumers agreed on the round, the reactor's business).
  # Effect: the task is gone from its job and its worker; the split grants it
  # held are dropped.
  taskId @0 :UInt64;
}

struct FinishTask {
  # Precondition: task `taskId` exists, is active and not finished.
  # Effect: the task is finished and leaves its worker's task list; its
  # outstanding splits count as consumed. When every task of the job is
  # finished, the job is finished.
  taskId @0 :UInt64;
}

struct HandOverTask {
  # Finishes a task on behalf of its worker, which is gone for good: no worker
  # has been registered at the task's address for the grace period
  # (--worker-grace-ms; the reactor's policy, as timeouts are).
  # Precondition: task `taskId` exists, is active (not pending) and not
  # finished; no worker is registered at its address; its job is DYNAMIC or
  # OFF and not round robin (static sharding and round robin are refused:
  # such tasks wait for their address).
  # Effect: for a DYNAMIC job created with `requeueUnfinishedSplits`, the
  # splits the task still holds go back to their provider's requeue list,
  # whatever repetition the provider is at (without it they are lost, as at
  # its worker's removal); then the task is finished as FinishTask finishes it
  # (when every task of the job is finished, the job is finished). For OFF,
  # the task's stream ends where it stopped.
  taskId @0 :UInt64;
}

# ---------------------------------------------------------------------------
# Closure coordination transitions. A closure's attempt number counts the
# assignments it has had; results and errors carry (worker, attempt) so that a
# report from an earlier attempt or an old worker incarnation is refused.

struct ClosureScheduled {
  # An item of ClosureBatch.scheduled.
  # Precondition: `closureId` >= the next closure id, nonzero and not 2^64-1; `functionName`
  # is non-empty; when `requestId` != 0, no unreleased closure of the
  # coordinator carries the same `requestId`.
  # Effect: adds a queued closure owned by `coordinatorId` to the global
  # queue, behind every queued closure of its `priority` or higher and ahead
  # of those of lower priority. The next closure id becomes `closureId` + 1. A coordinator
  # that retries a Schedule whose reply it lost finds its closure by requestId.
  closureId @0 :UInt64;
  coordinatorId @1 :UInt64;
  functionName @2 :Text;
  args @3 :Data;
  requestId @4 :UInt64;   # chosen by the coordinator; 0: none
  resources @5 :List(UInt64);
  # Per-worker resources (ResourceCreated) the function receives: each is
  # replaced by the running worker's own component. Precondition: each exists.
  priority @6 :Int32;
  # Higher is assigned first; FIFO within a priority (ClosureSpec.priority).
  # Records written before this field read 0.
  deadlineMicros @7 :Int64;
  # 0: none. Otherwise the update's time plus the closure's timeoutMs: past
  # it the dispatcher fails the closure (ClosureFailed.deadlineExceeded).
  inputs @8 :List(UInt64);
  # Closures whose results the function receives, in order. Precondition:
  # each is a closure of `coordinatorId` that exists (not released) and has
  # an id below `closureId`. Effect: when every input is finished the closure
  # is queued as above, else it is waiting. The effects on waiting closures
  # belong to their inputs' records: when its last unfinished input finishes
  # (ClosureFinished), a waiting closure joins the back of the queue, or is
  # cancelled when its coordinator has a pending first error (as a put back
  # is); when an input fails or is cancelled, the waiting closure fails (not
  # a user error, not the first error) with an error naming that input, and
  # so on to its own waiting dependants. A closure stays (and its stored
  # result with it) while any dependant is not done: the reactor holds back
  # its release until then.
}

struct ClosureAssigned {
  # An item of ClosureBatch.assigned.
  # Precondition: closure `closureId` is queued; worker `workerId` is
  # registered; `attempt` is the closure's attempt count + 1.
  # Effect: the closure leaves the queue and runs on the worker as `attempt`.
  closureId @0 :UInt64;
  workerId @1 :UInt64;
  attempt @2 :UInt32;
}

struct ClosureFinished {
  # An item of ClosureBatch.finished.
  # Precondition: closure `closureId` is assigned to `workerId` as `attempt`;
  # with `resultStored`, `result` is empty.
  # Effect: the closure is finished (its args are dropped) and holds its
  # result until released. Without `resultStored` (records written before results were stored apart)
  # the state holds the bytes of `result` itself. With `resultStored` the state
  # holds only `resultSize` and `resultCrc`: the bytes are in storage's result
  # table under `closureId`, written in the same transaction as this update
  # and deleted in the transaction of the closure's release (a `released`
  # batch). An empty result (`resultSize` 0) has no row.
  closureId @0 :UInt64;
  workerId @1 :UInt64;
  attempt @2 :UInt32;
  result @3 :Data;
  resultStored @4 :Bool;
  resultSize @5 :UInt64;     # with resultStored: the stored result's length in bytes
  resultCrc @6 :UInt32;      # with resultStored: CRC32C of the stored result's bytes
}

struct ClosureFailed {
  # Precondition: with `workerId` != 0, closure `closureId` is assigned to that
  # worker as `attempt`; with `workerId` == 0 (the dispatcher fails it, e.g. too
  # many attempts), the closure is queued, waiting or assigned. With
  # `deadlineExceeded`, `workerId` is 0 and the closure has a deadline.
  # Effect: the closure is failed (its args are dropped) and holds `error`
  # until released. Unless `infrastructure` or `deadlineExceeded`, when its
  # coordinator has no pending first error, this becomes it. Its waiting
  # dependants fail with it (ClosureScheduled.inputs).
  closureId @0 :UInt64;
  workerId @1 :UInt64;
  attempt @2 :UInt32;
  error @3 :Text;
  userError @4 :Bool;   # raised by the function itself (never retried)
  infrastructure @5 :Bool;
  # The closure's workers failed it (lost, unreachable, unavailable) until
  # its runs were used up (max_closure_attempts): not the function's error,
  # so never its coordinator's first error. Records written before this
  # field read false (they made every failure the first error).
  deadlineExceeded @6 :Bool;
  # The dispatcher failed it (`workerId` 0) because its deadline passed
  # (ClosureScheduled.deadlineMicros). Never its coordinator's first error.
  # The closure keeps its deadline (ClosureRecord.deadlineMicros); every
  # other end of a closure clears it.
}

struct ClosurePutBack {
  # Precondition: closure `closureId` is assigned to `workerId` as `attempt`.
  # Effect: the closure returns to the queue behind every queued closure of
  # its priority or higher (its priority, deadline and attempt count stay,
  # so the next assignment is attempt + 1). With `transient`, its
  # count of transient failures grows by one.
  closureId @0 :UInt64;
  workerId @1 :UInt64;
  attempt @2 :UInt32;
  transient @3 :Bool;   # the worker classed the error as transient (else: worker lost)
}

struct CoordinatorErrorCleared {
  # Precondition: coordinator `coordinatorId` has a pending first error.
  # Effect: the error is cleared (it has been raised to the coordinator once).
  coordinatorId @0 :UInt64;
}

struct ResourceCreated {
  # Precondition: `resourceId` >= the next resource id, nonzero and not 2^64-1;
  # `functionName` is non-empty; a nonzero `requestId` is not yet used by
  # another resource of the coordinator.
  # Effect: adds a per-worker resource: every worker process builds its own
  # component by running `functionName(args)` once, when it hears of it and
  # at the latest before the first closure that uses it. The next resource id
  # becomes `resourceId` + 1.
  resourceId @0 :UInt64;
  coordinatorId @1 :UInt64;
  functionName @2 :Text;
  args @3 :Data;
  requestId @4 :UInt64;
  # The coordinator's idempotency key (0: none): a retried call after a lost
  # reply gets the same resource instead of a second one.
}

struct ClosureBatch {
  # Many closure transitions of one kind in one record (one journal row), so
  # a loop pass that schedules, assigns, finishes or releases thousands of
  # closures writes a handful of rows. The reactor cuts its lists so that each
  # record fits the journal's per-record limit (16 MiB): one schedule call or
  # one pass's assignments may span several batches, applied in order.
  # A batch of one item is how a single closure makes these transitions.
  # Precondition: the items name distinct closures (and, for `scheduled`,
  # distinct nonzero request ids, in increasing closure id order), and each
  # meets its item's precondition against the state before the batch (a
  # `scheduled` item's inputs may also be earlier items of the same batch).
  # Effect: each item's effect, applied in list order.
  union {
    scheduled @0 :List(ClosureScheduled);
    assigned @1 :List(ClosureAssigned);
    finished @2 :List(ClosureFinished);
    # Effect (besides each item's): a waiting closure whose last unfinished
    # input this is joins the queue (ClosureScheduled.inputs).
    cancelled @3 :List(UInt64);
    # Closure ids. Precondition: each closure is queued, waiting or assigned.
    # Effect: it is cancelled (its args are dropped; a later result for it is
    # refused); its waiting dependants fail (ClosureScheduled.inputs). An item
    # that an earlier item's failure reached that way stays failed. A cancel is
    # never its coordinator's first error.
    released @4 :List(UInt64);
    # Closure ids. Precondition: each closure is finished, failed or
    # cancelled, and is no input of a closure that is not. Effect: it and its result are forgotten (fetched, or
    # dropped); a stored result's row is deleted in the same transaction.
  }
}

# ---------------------------------------------------------------------------

struct Update {
  timeMicros @0 :Int64;   # the reactor's clock when the update was built
  union {
    invalid @1 :Void;     # the default of an empty message: always rejected
    registerDataset @2 :RegisterDataset;
    setElementSpec @3 :SetElementSpec;
    registerWorker @4 :RegisterWorker;
    removeWorker @5 :RemoveWorker;
    createJob @6 :CreateJob;
    produceSplit @7 :ProduceSplit;
    acquireJobClient @8 :AcquireJobClient;
    releaseJobClient @9 :ReleaseJobClient;
    garbageCollectJob @10 :GarbageCollectJob;
    createTask @11 :CreateTask;
    createPendingTask @12 :CreatePendingTask;
    clientHeartbeat @13 :ClientHeartbeat;
    removeTask @14 :RemoveTask;
    finishTask @15 :FinishTask;
    # Retired: single-closure forms that no release ever wrote (closures have
    # always travelled in closureBatch records, a batch of one for a single
    # closure). Their numbers stay taken; a record holding one is refused
    # like `invalid`.
    retiredClosureScheduled @16 :Void;
    retiredClosureAssigned @17 :Void;
    retiredClosureFinished @18 :Void;
    closureFailed @19 :ClosureFailed;
    retiredClosureCancelled @20 :Void;
    closurePutBack @21 :ClosurePutBack;
    retiredClosureReleased @22 :Void;
    coordinatorErrorCleared @23 :CoordinatorErrorCleared;
    resourceCreated @24 :ResourceCreated;
    closureBatch @25 :ClosureBatch;
    handOverTask @26 :HandOverTask;
  }
}

# ---------------------------------------------------------------------------
# The whole state, in canonical order (every list sorted by its id).

struct StateSnapshot {
  formatVersion @0 :UInt32;   # 1
  nextDatasetId @1 :UInt64;
  nextWorkerId @2 :UInt64;
  nextJobId @3 :UInt64;
  nextTaskId @4 :UInt64;
  nextJobClientId @5 :UInt64;
  nextClosureId @6 :UInt64;
  nextQueuePosition @7 :UInt64;
  datasets @8 :List(DatasetRecord);
  workers @9 :List(WorkerRecord);
  jobs @10 :List(JobRecord);
  tasks @11 :List(TaskRecord);
  jobClients @12 :List(JobClientRecord);
  splitGrants @13 :List(SplitGrantRecord);
  closures @14 :List(ClosureRecord);
  coordinatorErrors @15 :List(CoordinatorErrorRecord);
  lastTimeMicros @16 :Int64;
  numApplied @17 :UInt64;     # updates applied since the empty state
  nextResourceId @18 :UInt64;
  resources @19 :List(ResourceRecord);
}

struct DatasetRecord {
  datasetId @0 :UInt64;
  fingerprint @1 :UInt64;
  metadata @2 :Data;
  definitionKey @3 :Text;
  hasElementSpec @4 :Bool;
  elementSpec @5 :Data;
  registeredMicros @6 :Int64;
  kind @7 :Text;              # as RegisterDataset.kind
}

struct WorkerRecord {
  workerId @0 :UInt64;
  address @1 :Text;
  transferAddress @2 :Text;
  tags @3 :List(Text);
  incarnation @4 :UInt64;
  registeredMicros @5 :Int64;
  datasetKinds @6 :List(Text);  # as RegisterWorker.datasetKinds, sorted and unique
}

struct SplitProviderRecord {
  repetition @0 :Int64;
  nextIndex @1 :UInt64;
  requeued @2 :List(UInt64);
}

struct PendingTaskRecord {
  taskId @0 :UInt64;
  targetRound @1 :Int64;
  failures @2 :Int64;
  readyClients @3 :List(UInt64);
}

struct JobRecord {
  jobId @0 :UInt64;
  datasetId @1 :UInt64;
  processingMode @2 :ProcessingMode;
  isNamed @3 :Bool;
  namedKey @4 :NamedJobKey;
  numConsumers @5 :UInt32;
  targetWorkers @6 :TargetWorkers;
  requeueUnfinishedSplits @7 :Bool;
  providers @8 :List(SplitProviderRecord);
  numClients @9 :Int64;
  lastClientReleasedMicros @10 :Int64;
  garbageCollected @11 :Bool;
  finished @12 :Bool;
  createdMicros @13 :Int64;
  pendingTasks @14 :List(PendingTaskRecord);   # queue order, front first
}

struct TaskRecord {
  taskId @0 :UInt64;
  jobId @1 :UInt64;
  workerAddress @2 :Text;
  transferAddress @3 :Text;
  startingRound @4 :Int64;
  pending @5 :Bool;
  finished @6 :Bool;
}

struct JobClientRecord {
  jobClientId @0 :UInt64;
  jobId @1 :UInt64;
  acquiredMicros @2 :Int64;
}

struct SplitGrantRecord {
  taskId @0 :UInt64;
  providerIndex @1 :UInt32;
  sequence @2 :UInt64;
  repetition @3 :Int64;
  splitIndices @4 :List(UInt64);
  endOfSplits @5 :Bool;
  outstanding @6 :Bool;
}

struct ClosureRecord {
  closureId @0 :UInt64;
  coordinatorId @1 :UInt64;
  functionName @2 :Text;
  args @3 :Data;             # empty once the closure is finished, failed or cancelled
  state @4 :ClosureState;
  workerId @5 :UInt64;
  attempts @6 :UInt32;
  queuePosition @7 :UInt64;
  result @8 :Data;
  error @9 :Text;
  userError @10 :Bool;
  scheduledMicros @11 :Int64;
  doneMicros @12 :Int64;
  requestId @13 :UInt64;
  resources @14 :List(UInt64);
  transientFailures @15 :UInt32;
  # Finished with a stored result (see ClosureFinished): `result` is empty and
  # the bytes are in storage's result table, which snapshots do not carry.
  resultStored @16 :Bool;
  resultSize @17 :UInt64;
  resultCrc @18 :UInt32;
  priority @19 :Int32;
  deadlineMicros @20 :Int64;
  # Queued or assigned: its deadline (0: none). Done: nonzero only for a
  # closure failed because its deadline passed.
  inputs @21 :List(UInt64);  # ClosureScheduled.inputs (kept until released)
}

struct ResourceRecord {
  resourceId @0 :UInt64;
  coordinatorId @1 :UInt64;
  functionName @2 :Text;
  args @3 :Data;
  requestId @4 :UInt64;
}

struct CoordinatorErrorRecord {
  coordinatorId @0 :UInt64;
  closureId @1 :UInt64;
  error @2 :Text;
}
