@0xf082c3b2198b49aa;
# The dispatcher's wire protocol. The bootstrap capability of every connection
# is a Gateway; nothing else is reachable before it accepts the caller's token.
#
# ---- Errors: the contract ----------------------------------------------
# A call the dispatcher refuses fails with a Cap'n Proto exception (rpc.capnp
# `Exception`) whose `reason` is exactly
#     CodeName ": " message
# CodeName is an ErrorCode enumerant's name with its first letter in upper
# case (`notFound` -> "NotFound"); `message` names the thing involved and the
# limit crossed ("dataset 7 is unknown"), in words that may change. The
# exception `type` is `overloaded` for ResourceExhausted, `disconnected` for
# Unavailable and `failed` for every other code. Cap'n Proto's C++ runtime
# hands a caller the description "remote exception: " + reason; other
# runtimes hand over the reason as is. Branch on CodeName: the text before
# the first ": " of the reason (after that "remote exception: ", if present).
# Nothing else of the text is stable. Every failure of a Gateway, Dispatcher
# or Coordinator method carries a CodeName: a request Cap'n Proto cannot read
# (a bad pointer, over the traversal or nesting limit) is InvalidArgument,
# and a failure the dispatcher did not classify (a bug) is Internal. Failures without one come from the RPC
# system, not from the dispatcher: `disconnected` when the connection dropped
# or the dispatcher closed it for crossing a per-connection limit (see
# ServerStats; reconnect, then retry), and `unimplemented` for a method this
# dispatcher does not have (an older one). Our C++ clients map an exception
# without a CodeName by type: disconnected -> Unavailable, overloaded ->
# ResourceExhausted, unimplemented -> InvalidArgument, failed -> Internal
# (common/rpc_status.h). Text fields that carry errors (ClosureOutcome.error,
# ClosureError.message) are prose, not this contract.

enum ErrorCode @0xb3b48c34434b9924 {
  # The CodeNames of the contract above, with what each means and how a
  # client retries. Never sent as a number (the code travels as the reason's
  # CodeName), so the ordinals mean nothing on the wire; the names are
  # stable. A request refused with any code changed nothing.
  invalidArgument @0;
  # Malformed, or over a per-call limit (named, e.g. --max-closures-per-call).
  # Do not retry the same request: fix it.
  notFound @1;
  # An id the dispatcher does not know (named): never issued, released, or
  # from before a restart that forgot it. Do not retry the same id.
  alreadyExists @2;
  # Not sent by this dispatcher (getOrRegister* calls return the existing
  # thing instead); reserved.
  failedPrecondition @3;
  # The request conflicts with the current state (named, e.g. a named job
  # reused with another processing mode). Retrying it unchanged gets the same
  # answer until the state changes: do not retry blindly.
  resourceExhausted @4;
  # Type `overloaded`. Over a size limit (named: one 16 MiB journal record,
  # --max-result-bytes-per-call, ...). The same request fails the same way:
  # send less (smaller bytes, fewer ids); back off only where the message
  # says the limit is one of capacity.
  unavailable @5;
  # Type `disconnected`. The dispatcher is shutting down. Reconnect with
  # backoff and retry: every method says its idempotency key.
  dataLoss @6;
  # Stored bytes the dispatcher cannot read back intact (named). Not
  # retried: an operator must look.
  internal @7;
  # A bug in the dispatcher (the message says where). Not retried; report it.
  unauthenticated @8;
  # Gateway.authenticate: the token is wrong. Retry only with another token.
  cancelled @9;
  # Not sent in exceptions: our clients' code for a cancelled closure.
  deadlineExceeded @10;
  # Not sent in exceptions: our clients' code for a closure past its
  # timeoutMs (ClosureOutcome.deadlineExceeded).
}

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("dispatch::rpc");

# This file and data_transfer.capnp are the whole wire protocol: they import
# nothing but the standard /capnp/c++.capnp, so a client in any language
# compiles them alone (PROTOCOL.md at the repository root says how to use
# them). The journal schema (journal.capnp) is internal and imports the enums
# below from here, never the reverse.

# ---- Enumerations (the journal records them too: ordinals never change) ----
# Their type ids are pinned to the ones they had when journal.capnp defined them.

enum ProcessingMode @0xc6b3d0fe50c07487 {
  off @0;         # every worker reads the whole dataset
  dynamic @1;     # distributed epoch: splits handed out one by one (getSplit)
  file @2;        # static sharding by file
  data @3;        # static sharding by element
  fileOrData @4;  # by file when possible, else by element
  hint @5;        # sharding where the pipeline says
}

enum TargetWorkers @0x80c63cd3b9373fa3 {
  auto @0;   # the dispatcher decides (ANY unless configured otherwise)
  any @1;    # any worker may serve the job
  local @2;  # only workers on the consumer's host
}

enum ClosureState @0xc890776138c3ce17 {
  queued @0;     # waiting for a worker slot
  assigned @1;   # running on a worker (one attempt in flight)
  finished @2;   # a result is held until fetched
  failed @3;     # an error is held until fetched
  cancelled @4;  # cancelled before it produced a result
  waiting @5;    # some input (ClosureSpec.inputs) is not finished yet
}

interface Gateway @0xd63b3058ab2548ee {
  authenticate @0 (token :Data, protocol :UInt32) -> (dispatcher :Dispatcher);
  # Hands out the dispatcher when `token` matches the one the dispatcher was
  # started with (any token, when it was started without one). A wrong token
  # fails with an Unauthenticated error and the connection stays at the gate,
  # where the right token may still be sent; the third failed authenticate
  # on one connection (successes in between do not reset the count) closes
  # it. A connection not authenticated within --handshake-timeout-ms is
  # closed. In HA mode (--etcd) a standby answers every authenticate with
  # Unavailable "not the leader; the leader is ADDRESS" (the leader's
  # --advertise address) or "not the leader; no leader is known yet".
  # `protocol` is the protocol version the caller speaks (Version.protocol
  # of the schema it was built from); 0, what a peer built before this field
  # sends, means version 1. With the right token, a caller older than the
  # oldest version this dispatcher serves fails with FailedPrecondition
  # naming both versions (upgrade the worker or client), and the connection
  # stays at the gate. A newer caller is served: it reads Version.protocol
  # and decides whether it can talk to an older dispatcher.
  # PROTOCOL.md describes the whole protocol.
}

struct Version @0xe589421a1e9f449e {
  protocol @0 :UInt32;    # bumped on every incompatible wire change
  build @1 :Text;         # the dispatcher's release, e.g. "0.1.0"
  incarnation @2 :UInt64; # random at each start: a change means the dispatcher restarted
}

interface Dispatcher @0x8f74785fcea7bbcc {
  getVersion @0 () -> (version :Version);

  ping @1 (payload :Data) -> (payload :Data);
  # Echoes `payload`; a liveness and round-trip probe that touches no state.

  getServerStats @2 () -> (stats :ServerStats);
  # Counters of the process itself: connections, calls, limits crossed, and
  # the housekeeping timer (which proves the loop is never starved).

  # ---- Data service: datasets ------------------------------------------
  # Every result below carries `incarnation` (the dispatcher's, see Version):
  # a caller that sees it change knows the dispatcher restarted.

  getOrRegisterDataset @3 (definition :Data, splitSource :SplitSource, elementSpec :Data,
                           metadata :Data) -> (datasetId :UInt64, incarnation :UInt64);
  # Registers the dataset once: a definition whose fingerprint (a hash of its
  # bytes, confirmed byte for byte) is already registered returns the existing
  # id, when it comes with the same split source and metadata; with another
  # split source or other metadata it is FailedPrecondition naming both, and
  # nothing changes. An empty `elementSpec` sets none; a non-empty one is set when the
  # dataset has none yet. Limits (ResourceExhausted naming the limit, nothing
  # registered): the definition up to 64 MiB; the element spec, and the split
  # source with `metadata`, each within one 16 MiB journal record.
  # The dataset's kind is the first word of the definition's first line (the
  # bytes up to the first space, tab, CR or newline, after leading ones), as
  # in "range count=10": jobs of the dataset get tasks only on workers that
  # produce that kind (WorkerHeartbeatRequest.datasetKinds). A first word
  # longer than the name limit or holding a control byte gives the dataset
  # no kind, and every worker is given its tasks. A job no registered worker
  # can produce waits without an error (as with no worker at all) until one
  # registers (ServerStats.jobsWithoutWorker counts such jobs).

  getDatasetDef @4 (datasetId :UInt64)
      -> (definition :Data, splitSource :SplitSource, metadata :Data, incarnation :UInt64);
  getElementSpec @5 (datasetId :UInt64) -> (elementSpec :Data, incarnation :UInt64);
  # FailedPrecondition when the dataset has no element spec.

  # ---- Data service: jobs and their consumers ---------------------------

  getOrCreateJob @6 (request :JobRequest) -> (jobId :UInt64, jobClientId :UInt64, incarnation :UInt64);
  # Creates the job (anonymous: always new; named: new unless a live job holds
  # the name and index) and a job client for the caller. Reusing a named job
  # with another processing mode or other target workers is a
  # FailedPrecondition naming both.

  clientHeartbeat @7 (request :ClientHeartbeatRequest) -> (response :ClientHeartbeatResponse);
  releaseJobClient @8 (jobClientId :UInt64) -> (incarnation :UInt64);
  # Idempotent: releasing a job client already released (or released by the
  # client timeout) succeeds, so a retry after a lost reply is safe. An id
  # this dispatcher never issued is NotFound naming it.
  maybeRemoveTask @9 (taskId :UInt64, consumerIndex :UInt32, round :Int64)
      -> (removed :Bool, incarnation :UInt64);
  # Round robin only: the task is removed once every consumer asked at the same round.

  getSplit @10 (request :SplitRequest) -> (response :SplitResponse);
  # DYNAMIC jobs: the next split(s) of one provider for one task. Idempotent
  # by `sequence`: a retry gets the same answer, across dispatcher restarts
  # (it is recognised by its sequence alone; only the latest sequence of a
  # (task, provider) is kept, an older one is FailedPrecondition). After
  # `endOfSplits` for repetition r, every request for r gets end of splits;
  # a worker that repeats the dataset asks for r + 1 (from index 0), one that
  # does not stops and reports its task complete. For a job with
  # requeueUnfinishedSplits, no splits without `endOfSplits` means "none now":
  # another task holds splits of r that may come back; ask again shortly with
  # the next sequence.
  # A batch holds at most what one 16 MiB journal record can (about 2 million
  # indices) and --max-splits-per-call: fewer than `maxSplits` may come.

  # ---- Workers ----------------------------------------------------------

  workerHeartbeat @11 (request :WorkerHeartbeatRequest) -> (response :WorkerHeartbeatResponse);
  # The first heartbeat of an address registers the worker (and its
  # WorkerControl); every heartbeat answers the tasks to start and to delete.
  # These replies are authoritative for tasks: WorkerControl.startTasks only
  # brings them sooner, and a worker without a WorkerControl gets its tasks
  # from the replies alone (and no closures, whatever its maxClosures).
  # `newTasks` holds at most 16 MiB of tasks: a worker that joins thousands of
  # jobs gets the rest with its next heartbeats (a task missing from
  # `currentTasks` is new again).
  # A registration (address, transfer address, tags) larger than one 16 MiB
  # journal record is ResourceExhausted and changes nothing (an earlier
  # registration at the address stays).
  workerUpdate @12 (workerId :UInt64, updates :List(TaskProgress)) -> (incarnation :UInt64);

  # ---- Listings (dispatchctl) -------------------------------------------

  getWorkers @13 () -> (workers :List(WorkerInfo), incarnation :UInt64);
  listDatasets @14 () -> (datasets :List(DatasetInfo), incarnation :UInt64);
  listJobs @15 () -> (jobs :List(JobInfo), incarnation :UInt64);
  getJob @16 (jobId :UInt64) -> (job :JobInfo, tasks :List(TaskInfo), clients :List(JobClientInfo),
                                 incarnation :UInt64);
  listTasks @17 () -> (tasks :List(TaskInfo), incarnation :UInt64);
  listJobClients @18 () -> (clients :List(JobClientInfo), incarnation :UInt64);

  # ---- Closures (the ClusterCoordinator) --------------------------------

  openCoordinator @19 (coordinatorId :UInt64) -> (coordinator :Coordinator, incarnation :UInt64);
  # The closures of coordinator `coordinatorId` (nonzero, chosen by the
  # caller, e.g. at random). Opening the same id again (after a reconnect, a
  # dispatcher restart, or from a new process) sees the same closures. Each
  # open is a session: it reports every outcome not released once
  # (awaitResults, which says what survives a restart).

  reportClosures @20 (workerId :UInt64, reports :List(ClosureReport))
      -> (incarnation :UInt64, ignored :UInt32);
  # A worker's outcomes of closures pushed to it by runClosures. A report for
  # a closure not running on `workerId` as `attempt` (a late duplicate, or an
  # earlier incarnation of the worker) is ignored and counted, not an error.
  # A result over the dispatcher's --max-result-bytes (told in every heartbeat
  # reply) fails its closure with an error naming that limit, not retried;
  # error texts are kept up to 64 KiB (the rest is cut with a note). Results
  # are stored apart from the journal, in the same transaction; one of
  # --result-file-bytes or more is first written to a file of its own, and a
  # report for a closure that ended meanwhile (or a second report of it while
  # its file is written) is ignored too. The reply comes once every outcome
  # it carried is durable.

  getClosureStats @21 () -> (stats :ClosureStats, incarnation :UInt64);

  # ---- Operations (dispatchctl) -----------------------------------------

  backup @22 (targetDir :Text)
      -> (lastRecord :UInt64, databaseBytes :UInt64, filesLinked :UInt32, filesCopied :UInt32,
          incarnation :UInt64);
  # Writes a consistent copy of the work dir into `targetDir` while the
  # dispatcher keeps serving, and replies once the copy is complete and
  # synced. `targetDir` is an absolute path on the dispatcher's machine that
  # does not exist (its parent does) or is an empty directory. The copy holds
  # the journal up to record `lastRecord`: every change acknowledged before
  # the call, and perhaps some made while it ran. It is a work dir: a
  # dispatcher started with --work-dir=targetDir resumes from it. The
  # snapshot and result files are hard links (`filesLinked`) when
  # `targetDir` is on the work dir's file system, copies (`filesCopied`)
  # otherwise. Refused, changing nothing: a relative path (InvalidArgument);
  # a `targetDir` that is not empty, is not a directory, or is the work dir
  # or inside it, a backup already running, and HA mode, whose journal is
  # etcd's (FailedPrecondition). A backup that fails midway (Unavailable,
  # ResourceExhausted: the target's disk) removes what it wrote. A caller
  # that goes away does not stop it. A retry after a lost reply finds
  # `targetDir` not empty.

  cancelCoordinator @23 (coordinatorId :UInt64) -> (cancelled :UInt64, incarnation :UInt64);
  # Cancels every closure of coordinator `coordinatorId` that is not done
  # (waiting for inputs, queued or running), as Coordinator.cancel cancels
  # each: it becomes `cancelled`, a worker running it is told to drop it
  # (WorkerControl.cancelClosures, best effort), its outcome is reported to
  # the coordinator's sessions, and it is no first error. Closures that are
  # done keep their outcomes. `cancelled`: how many it cancelled; 0 when
  # none was left to cancel (a second call). Journaled before the reply.
  # Refused, changing nothing: `coordinatorId` 0 (InvalidArgument); a
  # coordinator with no unreleased closure (NotFound). The coordinator can
  # go on scheduling.

}

interface Coordinator @0xc5d6e9f18ef3a3ba {
  schedule @0 (closures :List(ClosureSpec)) -> (closureIds :List(UInt64), error :ClosureError);
  # Queues the closures (in order) and returns their ids. Waits while the
  # closure queue is full (back-pressure). When the coordinator has a pending
  # first error, schedules nothing and returns it in `error` (which clears it),
  # unless the call retries one whose reply was lost (a closure's `requestId`
  # names one of the coordinator's closures): then the ids are returned as
  # below (closures of the call not scheduled before are scheduled and
  # cancelled at once) and the error waits for the next call.
  # A closure whose `requestId` the coordinator already used (a retry after a
  # lost reply) is not queued again: its existing id is returned.
  # A call with a `requestId` that an earlier call had when a first error
  # refused it gets that same refusal again (the same `error`, nothing
  # scheduled), so a late copy of a refused call never queues closures the
  # client was told were not queued. If the call also retries a closure that
  # was scheduled (a client resending several unanswered calls as one), it
  # gets every id instead, and the refused closures are cancelled at once
  # (they never run). Refusals are remembered in memory for the newest
  # 65,536 refused request ids (ClosureStats.refusalsForgotten counts the
  # rest), and not across a dispatcher restart (which ends every connection
  # a late copy could come on).
  # All or nothing: every closure is checked before any is queued. A closure
  # that alone does not fit one 16 MiB journal record (function, args,
  # resources) fails the whole call with ResourceExhausted naming its index,
  # its size and the limit; nothing is queued. Closures that fit are journaled
  # in as many records as they need; should the process die between two of
  # those commits (before the reply), a retry with the same request ids
  # queues only the rest.

  awaitResults @1 (release :List(UInt64), maxResults :UInt32) -> (results :List(ClosureOutcome));
  # First releases `release` (finished, failed or cancelled closures whose
  # outcome the caller holds; the dispatcher forgets them and deletes their
  # stored results), then waits until this session has outcomes it has not
  # returned yet and returns up to `maxResults` (0: all, up to the
  # dispatcher's --max-results-per-call) of them, as many as fit in
  # --max-result-bytes-per-call bytes of results (at least one). A result
  # the dispatcher cannot read back intact is never sent: its outcome comes
  # as `failed` with a DataLoss error naming the closure.
  # Releases: idempotent (an id released before, or unknown, is skipped, so
  # resending them after a lost reply is safe); a closure of another
  # coordinator is NotFound, one not done FailedPrecondition, and then
  # nothing is released. The release is journaled before the reply leaves:
  # once the reply arrives it survives any crash, and no session reports
  # those outcomes again. One exception: a closure that is an input
  # (ClosureSpec.inputs) of a closure not done yet is gone for the caller at
  # once, but kept with its result until its last dependant is done, and its
  # release is journaled only then; a dispatcher restart before that reports
  # its outcome again.
  # Delivery: a session reports each outcome once. A new session (after a
  # reconnect or a restart) starts with every outcome of the coordinator not
  # released: those whose release was never sent or whose reply was lost, and
  # held inputs as above. So outcomes are delivered at least once across
  # sessions; a client that hands each to its user once dedups by closure id
  # (and releases a repeated one again).

  join @2 (wait :Bool) -> (done :Bool, error :ClosureError, unfinished :UInt64);
  # done: none of the coordinator's closures is queued or running. With
  # `wait`, resolves once done or once the coordinator has a first error. A
  # pending first error is returned in `error` (which clears it); then done
  # is false.

  createPerWorkerResource @3 (function :Text, args :Data, requestId :UInt64)
      -> (resourceId :UInt64);
  # Function and args within one 16 MiB journal record, else
  # ResourceExhausted naming the limit (nothing created).
  # Every worker builds its own component with function(args); a closure
  # that lists the resource receives the component of the worker it runs on.
  # A worker that comes back after a failure rebuilds it first.

  getOutcomes @4 (closureIds :List(UInt64)) -> (outcomes :List(ClosureOutcome));
  # The current state (and outcome, when done) of each closure, without
  # waiting and without releasing. A closure that is unknown (never
  # scheduled, or released) is NotFound naming it. More than one closure
  # whose results together exceed --max-result-bytes-per-call is
  # ResourceExhausted naming the limit (ask for fewer at a time).

  cancel @5 (closureIds :List(UInt64)) -> (states :List(ClosureState));
  # Cancels each closure that is queued or running: it becomes `cancelled`
  # (journaled; its outcome is reported like any other, and it is not its
  # coordinator's first error). A queued one never runs. A running one's
  # worker is told (WorkerControl.cancelClosures, best effort: a worker drops
  # a closure it has not started; a function already running may run on, its
  # result ignored and counted in ClosureStats.lateReportsIgnored).
  # Idempotent: a closure already cancelled stays so. A closure already
  # finished or failed is left as it is. `states` holds, per id in order, the
  # closure's state after the call: `cancelled`, or `finished` / `failed` for
  # one that was done before (left as is). All or nothing: an id that is not
  # a closure of this coordinator (never scheduled, or released) is NotFound
  # naming it and nothing is cancelled; more than --max-closures-per-call ids
  # is InvalidArgument naming the limit.
}

struct ClosureSpec @0xc973afec194526ae {
  function @0 :Text;
  args @1 :Data;
  requestId @2 :UInt64;          # nonzero: the idempotency key of this schedule
  resources @3 :List(UInt64);    # per-worker resources the function receives
  priority @4 :Int32;
  # Higher runs first: of the queued closures a free worker slot can take,
  # the one with the highest priority goes first, and among equal priorities
  # the one queued first (FIFO). Default 0; negative values run after the
  # default. A closure put back in the queue (its worker was lost, or a
  # transient error) keeps its priority and goes behind the closures of that
  # priority queued before. A running closure is never preempted. Journaled:
  # kept across dispatcher restarts.
  timeoutMs @5 :UInt32;
  # 0: none. Otherwise the closure's deadline is the dispatcher's clock at
  # schedule plus this (journaled, so it survives a restart). A closure not
  # finished by then, queued or running, fails: its outcome is `failed` with
  # `deadlineExceeded` and an error saying "deadline exceeded" and the
  # timeout; its worker, if it runs it, is told (WorkerControl.cancelClosures)
  # and a later result is ignored and counted (ClosureStats.lateReportsIgnored).
  # Deadlines are checked by one timer at the earliest deadline, so a closure
  # fails within a few milliseconds after it. A timed-out closure is not its
  # coordinator's first error and cancels nothing: the timeout was the
  # caller's choice for that closure, and its RemoteValue reports it.
  inputs @6 :List(UInt64);
  # Dependencies: closures whose results the function receives, in order
  # (ClosureAssignment.inputs). Each entry is the id of a closure of the same
  # coordinator that is scheduled and not released, or, with the top bit set
  # (kInputInCall = 2^63 + i), the closure at index i (< this one's) of the
  # same schedule call. An unknown or released input is NotFound naming it;
  # nothing of the call is queued. The closure waits (ClosureStats.waiting:
  # not queued, not runnable) until every input is finished, then joins the
  # back of the queue. An input that fails or is cancelled fails it (and
  # transitively its own dependants) with an error naming that input; such a
  # failure is not the coordinator's first error (the input's own failure, if
  # the function's, already is) and cancels nothing. A release of an input
  # while a dependant is not done is held back: the input is gone for the
  # coordinator at once, but its result stays until its last dependant is
  # done. A closure whose inputs with its function and args exceed the push
  # limit (16 MiB) fails when assigned, with ResourceExhausted naming it.
  trace @7 :List(UInt64);
  # Empty (the default): no trace, and no trace field is set anywhere for
  # this closure. Otherwise a per-stage timestamp trace of the closure is
  # asked for (benchmarks, diagnosis), and this holds the caller's own first
  # stamps: [when the user scheduled it, when the schedule call was sent];
  # entries past the second are ignored. The dispatcher then fills
  # ClosureOutcome.trace (the layout is there). It traces at most 4096
  # closures at a time: past that a trace is dropped, not an error
  # (ClosureStats.tracesDropped), and the outcome comes without one.
}

struct ClosureError @0xcdc710afdef07590 {
  closureId @0 :UInt64;          # 0: no error
  message @1 :Text;
}

struct ClosureOutcome @0xa97ae1f22c757e88 {
  closureId @0 :UInt64;
  state @1 :ClosureState;
  result @2 :Data;               # finished
  error @3 :Text;                # failed
  userError @4 :Bool;            # failed by the function itself (not retried)
  attempts @5 :UInt32;
  deadlineExceeded @6 :Bool;     # failed: its timeoutMs passed (never the first error)
  trace @7 :List(UInt64);
  # Empty unless ClosureSpec.trace asked for one (and the dispatcher still
  # held it: it goes with the first reply that carries the outcome). 12
  # stamps, nanoseconds of the host's monotonic clock (CLOCK_MONOTONIC, so
  # comparable only among processes of one host), 0 for a stage not reached
  # (e.g. a closure cancelled before it ran):
  #   0, 1  ClosureSpec.trace[0], [1] (the caller's: scheduled, sent)
  #   2     the dispatcher handled the schedule call
  #   3     the dispatcher sent the runClosures push that ran it (last attempt)
  #   4..7  ClosureReport.trace[0..3] (the worker's: received, run started,
  #         run ended, report sent)
  #   8     the dispatcher handled that report
  #   9, 10 start and end of the dispatcher's last journal commit before this
  #         reply left (the one that made the outcome durable, or later)
  #   11    the dispatcher released this reply (after that commit)
}

struct ClosureAssignment @0xf488b43ede8969ca {
  closureId @0 :UInt64;
  attempt @1 :UInt32;            # echoed in the report (fencing)
  function @2 :Text;
  args @3 :Data;
  resources @4 :List(UInt64);    # replace by this worker's components, in order
  inputs @5 :List(Data);         # the results of ClosureSpec.inputs, in order
  trace @6 :Bool;
  # The closure's ClosureSpec.trace asked for a trace: the worker puts its
  # stamps in ClosureReport.trace. False for every other closure.
}

struct ResourceSpec @0x9e56ed593e66bc79 {
  resourceId @0 :UInt64;
  function @1 :Text;
  args @2 :Data;
}

struct ClosureReport @0xdb47682675083ec4 {
  closureId @0 :UInt64;
  attempt @1 :UInt32;
  union {
    result @2 :Data;             # the function returned
    userError @3 :Text;          # the function failed: not retried; the coordinator's error
    transientError @4 :Text;     # retried elsewhere up to the transient limit
    unavailable @5 :Text;        # this worker cannot run closures now: retried elsewhere
  }
  trace @6 :List(UInt64);
  # Empty unless ClosureAssignment.trace: then 4 stamps (CLOCK_MONOTONIC
  # nanoseconds) of this run: the push received, the function started, the
  # function returned, this report sent. The dispatcher copies them into
  # ClosureOutcome.trace[4..7]; it ignores them for a closure it does not
  # trace.
}

struct ClosureStats @0xe18a76620813c516 {
  queued @0 :UInt64;
  assigned @1 :UInt64;
  finished @2 :UInt64;           # held until released
  failed @3 :UInt64;
  cancelled @4 :UInt64;
  # Counters since this dispatcher process started.
  scheduledTotal @5 :UInt64;
  resultsAccepted @6 :UInt64;
  reportsIgnored @7 :UInt64;     # duplicates and stale attempts
  putBack @8 :UInt64;            # returned to the queue after a worker failure
  transientRetries @9 :UInt64;
  attemptsExhausted @10 :UInt64; # failed after max_closure_attempts runs
  releasedTotal @11 :UInt64;
  pushesFailed @12 :UInt64;
  scheduleWaits @13 :UInt64;     # schedule calls that waited for queue room
  # Results: the dispatcher keeps finished closures' result bytes in its
  # store, not in memory, and reads them back for each reply.
  resultsOverLimit @14 :UInt64;  # results refused as over --max-result-bytes (closure failed)
  resultsStored @15 :UInt64;     # results written to the store
  resultsRead @16 :UInt64;       # results read back from the store for replies and input pushes
  resultsDamaged @17 :UInt64;    # stored results found missing or damaged: not served
  queuedWithoutWorker @18 :UInt64;
  # Of `queued`, the closures no connected worker can run now: no worker with
  # closure slots registered their function, or the function of one of their
  # per-worker resources (workerHeartbeat `functions`). They wait, not an
  # error, and go to the first worker that registered it.
  cancelRequested @19 :UInt64;     # closures cancelled by Coordinator.cancel
  cancelledRunning @20 :UInt64;    # of those, running ones (their worker was told)
  deadlinesExceeded @21 :UInt64;   # closures failed by their timeoutMs
  lateReportsIgnored @22 :UInt64;
  # Reports for a closure cancelled or timed out while it ran: ignored (and
  # counted in reportsIgnored too). One arriving after the closure was
  # released counts in reportsIgnored only.
  waiting @23 :UInt64;
  # Closures waiting for their inputs (ClosureSpec.inputs) to finish: not
  # queued, not runnable, but they count against --max-queued-closures.
  inputBytesPushed @24 :UInt64;  # input result bytes read back and pushed to workers
  inputsOverLimit @25 :UInt64;   # closures failed: inputs over the push limit
  refusalsRepeated @26 :UInt64;
  # Schedule calls answered with an earlier refusal of one of their request
  # ids (see Coordinator.schedule): late copies, or retries of a lost reply.
  refusalsForgotten @27 :UInt64;
  # Request ids whose refusal the dispatcher no longer remembers (its bound:
  # the newest 65,536 request ids and 8 MiB of error text).
  tracesDropped @28 :UInt64;
  # Traces asked for (ClosureSpec.trace) and not kept: 4096 closures were
  # being traced already. Their outcomes come without a trace.
  stuckEpisodes @29 :UInt64;
  # The closure watchdog: times closures were running (assigned) and none
  # finished (no worker reported an outcome) for --stuck-closure-warning-ms.
  # Each episode is logged once as a warning naming the running closures; it
  # ends when a run finishes or none runs.
  stuckClosures @30 :UInt64;
  # Closures running in the current stuck episode; 0 when none is on.
  resultsReadOffLoop @31 :UInt64;
  # Of resultsRead, those read on the dispatcher's thread pool, not its
  # event loop: the stored results of a reply, or the stored inputs of a
  # closure pushed to a worker, when they come to 64 KiB or more in all.
}

struct SplitSource @0xd72d95c8c6bbd493 {
  # How the dispatcher hands out splits of a dataset for DYNAMIC jobs.
  union {
    none @0 :Void;               # no dynamic sharding
    indexed @1 :UInt64;          # N splits, numbered 0..N-1 (the payload is empty)
    explicit @2 :List(Data);     # split i is payload i (e.g. file names)
  }
}

struct DatasetMetadata @0x9399e21a7b582ac1 {
  # What the dispatcher keeps about a dataset besides its definition bytes:
  # encoded as one flat message into the journal's RegisterDataset.metadata.
  splitSource @0 :SplitSource;
  userMetadata @1 :Data;         # the caller's `metadata`, returned by getDatasetDef
}

struct JobRequest @0x95c08c7fedd5dbd4 {
  datasetId @0 :UInt64;
  processingMode @1 :ProcessingMode;
  jobName @2 :Text;              # empty: an anonymous job
  jobNameIndex @3 :Int64;        # distinguishes repetitions of a named job
  numConsumers @4 :UInt32;       # 0: no round robin
  targetWorkers @5 :TargetWorkers;
  requeueUnfinishedSplits @6 :Bool;  # DYNAMIC: a dead worker's unfinished splits are handed out again
  # (and a repetition ends only once no task holds splits of it: PROTOCOL.md, getSplit)
}

struct TaskInfo @0x873f54ce1fa07543 {
  taskId @0 :UInt64;
  jobId @1 :UInt64;
  datasetId @2 :UInt64;
  workerAddress @3 :Text;
  transferAddress @4 :Text;
  startingRound @5 :Int64;
  processingMode @6 :ProcessingMode;
  # Static sharding (FILE, DATA, FILE_OR_DATA, HINT): this worker's place in
  # the configured worker list. -1 / 0 otherwise.
  workerIndex @7 :Int64;
  numWorkers @8 :UInt32;
  numSplitProviders @9 :UInt32;
  numConsumers @10 :UInt32;
  finished @11 :Bool;
  pending @12 :Bool;             # round robin: waiting for every consumer to agree
}

struct ClientHeartbeatRequest @0x8da81078aa1c332a {
  jobClientId @0 :UInt64;
  currentRound @1 :Int64;        # round robin: -1 when none
  blockedRound @2 :Int64;        # round robin: -1 when not blocked
  knownTaskListVersion @3 :UInt64;  # 0: send the list whatever it is
}

struct ClientHeartbeatResponse @0xde0e439dc89a9422 {
  taskListVersion @0 :UInt64;
  taskListChanged @1 :Bool;      # false: `tasks` is empty, keep the list you have
  tasks @2 :List(TaskInfo);
  jobFinished @3 :Bool;
  incarnation @4 :UInt64;
  blockRound @5 :Int64;          # round robin: the front pending task's target round, where
                                 # consumers should block until it is accepted; -1 when none
}

struct SplitRequest @0x82e4c944167a0533 {
  taskId @0 :UInt64;
  repetition @1 :Int64;          # 0 first; r + 1 after end of splits for r, to repeat
  providerIndex @2 :UInt32;
  sequence @3 :UInt64;           # per (task, provider): nonzero, any first value, then
                                 # strictly increasing (gaps allowed); a retry repeats it
  maxSplits @4 :UInt32;          # 0 or 1: one split; more: a batch in one update
}

struct SplitResponse @0xd4cb0ae786ffd32a {
  splits @0 :List(Split);
  endOfSplits @1 :Bool;          # this repetition has no more splits for anyone
  repetition @2 :Int64;          # the repetition the answer is for
  incarnation @3 :UInt64;
}

struct Split @0x97df665c9401e04f {
  index @0 :UInt64;
  payload @1 :Data;
}

struct WorkerHeartbeatRequest @0xcb578b95f651f783 {
  address @0 :Text;              # unique per worker; its identity across reconnects (its tasks
                                 # wait here for --worker-grace-ms after its removal)
  transferAddress @1 :Text;      # where consumers read elements
  tags @2 :List(Text);
  workerIncarnation @3 :UInt64;  # random per worker process start
  control @4 :WorkerControl;
  # Tasks and closures are pushed here. Send it with every heartbeat: after a
  # reconnect or a new registration, a heartbeat without it leaves the worker
  # with none (no pushes, no closures) until one comes.
  currentTasks @5 :List(UInt64);
  maxClosures @6 :UInt32;        # closure slots (0: runs no closures)
  functions @7 :List(Text);
  # The closure functions this worker registered: it is given only closures
  # whose function, and whose per-worker resources' functions, are listed
  # (a worker listing none runs no closures). Fixed for a worker process.
  datasetKinds @8 :List(Text);
  # The dataset kinds this worker produces (a dataset's kind is the first word
  # of its definition, see getOrRegisterDataset). A worker listing kinds is
  # given a task only of jobs whose dataset's kind is listed, or whose dataset
  # has no kind. A worker listing none (every worker before this field)
  # announces nothing and is given a task of every job, as before: it fails the
  # tasks of kinds it cannot produce. Each kind is nonempty and within the
  # name limit (else InvalidArgument naming it, nothing changes). Fixed for a worker process:
  # the list of the heartbeat that registers it counts, later ones are ignored.
}

struct WorkerHeartbeatResponse @0xc2faba3584071f05 {
  workerId @0 :UInt64;
  newTasks @1 :List(TaskInfo);
  tasksToDelete @2 :List(UInt64);
  incarnation @3 :UInt64;
  heartbeatIntervalMillis @4 :UInt32;  # how often the dispatcher wants to hear from it
  maxResultBytes @5 :UInt64;
  # The largest closure result the dispatcher accepts (its --max-result-bytes;
  # 0: not said). A worker reports a larger result as a user error naming this
  # limit instead of sending it (the dispatcher would fail the closure the same
  # way), and keeps the result and error bytes of one reportClosures call
  # within it (one report always goes), so no report crosses the connection's
  # message limit.
}

struct TaskProgress @0x8968f524500bff31 {
  taskId @0 :UInt64;
  completed @1 :Bool;
}

struct WorkerInfo @0x8df4345f4464d8f7 {
  workerId @0 :UInt64;
  address @1 :Text;
  transferAddress @2 :Text;
  tags @3 :List(Text);
  connected @4 :Bool;
  numTasks @5 :UInt32;
  lastHeartbeatMicros @6 :Int64;
  datasetKinds @7 :List(Text);   # as registered, sorted; empty: announced none (serves every job)
}

struct DatasetInfo @0xdedb154bd78b990e {
  datasetId @0 :UInt64;
  fingerprint @1 :UInt64;
  hasElementSpec @2 :Bool;
  numSplits @3 :UInt64;
  kind @4 :Text;                 # the first word of its definition; empty: none (any worker)
}

struct JobInfo @0xe25323511119f606 {
  jobId @0 :UInt64;
  datasetId @1 :UInt64;
  jobName @2 :Text;
  jobNameIndex @3 :Int64;
  processingMode @4 :ProcessingMode;
  numConsumers @5 :UInt32;
  targetWorkers @6 :TargetWorkers;
  numClients @7 :UInt32;
  finished @8 :Bool;
  garbageCollected @9 :Bool;
  numTasks @10 :UInt32;
}

struct JobClientInfo @0xe6ab10d8a09e35f9 {
  jobClientId @0 :UInt64;
  jobId @1 :UInt64;
  lastHeartbeatMicros @2 :Int64;
}

struct ServerStats @0xc83666b68b88b628 {
  uptimeMicros @0 :UInt64;
  connectionsOpen @1 :UInt32;
  connectionsAccepted @2 :UInt64;
  callsTotal @3 :UInt64;
  callsInFlight @4 :UInt32;
  # Connections closed because they crossed a limit, by limit.
  refusedOverConnectionLimit @5 :UInt64;
  closedHandshakeTimeout @6 :UInt64;
  closedOutboundBytes @7 :UInt64;
  closedCallsInFlight @8 :UInt64;
  authenticationFailures @9 :UInt64;
  # The housekeeping timer: how often it fired and its worst lateness.
  ticks @10 :UInt64;
  tickIntervalMicros @11 :UInt64;
  maxTickLatenessMicros @12 :UInt64;
  # The thread that runs uv_run, and how many handler/timer callbacks ran on
  # another thread (always 0: one thread owns the state).
  loopThreadId @13 :UInt64;
  callbacksOffLoopThread @14 :UInt64;
  # Connections refused because their peer address already had
  # --max-connections-per-address open (TCP peers; Unix sockets have none).
  refusedOverAddressLimit @15 :UInt64;
  # Connections closed because a message begun on them was not complete
  # within --message-timeout-ms (checked once per housekeeping tick).
  closedMessageTimeout @16 :UInt64;
  # Messages over --max-message-bytes. Each closes its connection, after its
  # body (up to 1 GiB) was read and thrown away, with an abort whose reason
  # names the limit; one warning is logged per message.
  closedOversizedMessage @17 :UInt64;
  # The process-wide peer memory budget (--peer-memory-budget-bytes): bytes
  # held on behalf of all peers together. A message reserves its size from
  # its size table to its last byte; queued replies are charged as sampled by
  # the housekeeping tick. Messages over 64 KiB may use the budget up to 7/8
  # of the limit, smaller ones all of it. `peerMemoryUsedBytes` may pass the
  # limit only through queued replies (which are already built).
  peerMemoryLimitBytes @18 :UInt64;
  peerMemoryUsedBytes @19 :UInt64;
  peerMemoryHighWaterBytes @20 :UInt64;
  # Of `peerMemoryUsedBytes`, the replies queued for peers.
  peerMemoryQueuedReplyBytes @21 :UInt64;
  # Messages whose body waited for the budget (their peer is not read while
  # they wait; the message deadline still runs), and how many wait now.
  peerMemoryWaits @22 :UInt64;
  peerMemoryWaiting @23 :UInt32;
  # Messages larger than the budget could ever hold: refused like an
  # oversized message (body discarded, abort naming the budget), counted here.
  peerMemoryRefusals @24 :UInt64;
  # Connections closed because the replies queued for all peers together
  # crossed the budget (the one with the most queued goes first).
  closedOutboundOverBudget @25 :UInt64;
  # Queued closures no connected worker can run now, waiting for a worker
  # that registers their functions (ClosureStats.queuedWithoutWorker).
  closuresWithoutWorker @26 :UInt64;
  # Unfinished jobs that no registered worker can produce (none announces
  # their dataset's kind, or no worker is registered): they wait, with no
  # tasks on such workers, for a worker that can.
  jobsWithoutWorker @27 :UInt64;
  # Passes of the event loop so far, and how long they kept the loop busy:
  # a pass's busy time is its wall time less the time the loop waited for
  # I/O in it, the longest a reply ready at its start could wait for the
  # loop. `maxLoopPassMicros`: the longest since the loop began (start-up
  # and recovery before it are not a pass);
  # `loopPassesOver10Ms`: how many took more than 10 ms.
  loopPasses @28 :UInt64;
  maxLoopPassMicros @29 :UInt64;
  loopPassesOver10Ms @30 :UInt64;
}

interface WorkerControl @0xa8eac0fa617cee1b {
  # What the dispatcher can ask of a worker. A worker hands this capability
  # to the dispatcher in its heartbeat; the dispatcher pushes over it, never
  # blocking its loop on the answer. A push that fails because the worker is
  # gone is redone when the worker comes back.

  startTasks @0 (tasks :List(TaskInfo)) -> ();
  # Start these tasks (idempotent: a task already running is left alone).

  deleteTasks @1 (taskIds :List(UInt64)) -> ();
  # Stop and forget these tasks.

  runClosures @2 (closures :List(ClosureAssignment), resources :List(ResourceSpec)) -> ();
  # Run these closures, each on a free slot; each outcome comes back in
  # Dispatcher.reportClosures. `resources` defines the per-worker resources
  # they use: the worker builds a component it lacks before the first closure
  # that needs it. The reply only acknowledges receipt.

  cancelClosures @3 (closureIds :List(UInt64)) -> ();
  # These closures were cancelled or timed out at the dispatcher: best
  # effort, a worker drops each it has not started, and need not report
  # them; a function already running may be left to finish (its report is
  # ignored). Sent once, not redone if the worker is gone. The reply only
  # acknowledges receipt.
}
