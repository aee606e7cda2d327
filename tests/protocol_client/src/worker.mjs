// A worker (PROTOCOL.md, "The worker life cycle"): registers by heartbeat with
// its own WorkerControl, keeps heartbeating at the interval the dispatcher
// asks for, runs the closures pushed to it with the functions it registered
// and reports their outcomes, and runs each DYNAMIC task the way a worker's
// task reads its splits: getSplit by increasing sequence until end of splits,
// then workerUpdate(completed).

import * as crypto from "node:crypto";
import { DispatcherConnection, dataBytes, setData } from "./connection.mjs";
import { getSplit } from "./data_service.mjs";
import { Enums, Wire } from "./schema.mjs";

// Thrown by a closure function for a failure of the function itself (the
// wire's userError: not retried, its coordinator's first error).
export class UserError extends Error {}

function randomNonZeroU64() {
  for (;;) {
    const v = crypto.randomBytes(8).readBigUInt64LE(0);
    if (v !== 0n) return v;
  }
}

export class Worker {
  // options: dispatcherAddress, address, token, maxClosures,
  //          functions: { name: (args: Uint8Array, inputs: Uint8Array[]) => Uint8Array | Promise },
  //          splitBatch (maxSplits per getSplit), readSplits (false: DYNAMIC tasks
  //          are left to the caller, who reads and completes them by hand).
  static async start(options) {
    const w = new Worker(options);
    await w.connect();
    return w;
  }

  constructor(options) {
    this.options = options;
    this.functions = options.functions ?? {};
    this.incarnation = randomNonZeroU64();
    this.workerId = 0n;
    this.dispatcherIncarnation = 0n;
    this.intervalMs = 1000;
    this.maxResultBytes = 0n;
    this.tasks = new Map();          // taskId (bigint) -> { info, state, splits }
    this.cancelled = new Set();      // closure ids told cancelled, not started yet
    this.running = 0;
    this.stopped = false;
    this.heartbeats = 0;
    this.pushes = { startTasks: 0, deleteTasks: 0, runClosures: 0, cancelClosures: 0 };
    this.closuresRun = 0;
    this.reportsIgnored = 0;
    this.errors = [];
    this.registered = new Promise((resolve) => { this.onRegistered = resolve; });
  }

  async connect() {
    await this.attach();
    this.scheduleHeartbeat();
  }

  // One connection: authenticate, serve a WorkerControl of its own on it,
  // heartbeat. Closures pushed on an earlier connection are dropped (their
  // reports would be ignored: PROTOCOL.md, "Lost closures").
  async attach() {
    const connection = await DispatcherConnection.open(this.options.dispatcherAddress,
                                                       this.options.token);
    this.generation = (this.generation ?? 0) + 1;
    this.connection = connection;
    this.dispatcher = connection.dispatcher;
    this.control = new Wire.WorkerControl.Server(this.controlImpl(this.generation));
    connection.onClose(() => { if (!this.stopped) this.reconnect(); });
    await this.heartbeat();
  }

  // After a drop (a dispatcher restart): reconnect with backoff, heartbeat
  // with the same workerIncarnation, which keeps the registration.
  async reconnect() {
    let backoffMs = 20;
    while (!this.stopped) {
      try {
        await this.attach();
        this.reconnects = (this.reconnects ?? 0) + 1;
        return;
      } catch (e) {
        this.connection?.close();
        await new Promise((r) => setTimeout(r, backoffMs));
        backoffMs = Math.min(backoffMs * 2, 1000);
      }
    }
  }

  controlImpl(generation) {
    const self = this;
    return {
      async startTasks(params) {
        self.pushes.startTasks++;
        for (const t of params.tasks) self.addTask(t, "startTasks");
      },
      async deleteTasks(params) {
        self.pushes.deleteTasks++;
        for (const id of params.taskIds) self.tasks.delete(id);
      },
      async runClosures(params) {
        self.pushes.runClosures++;
        // Copy out of the message now: the call's message is not ours after the reply.
        const closures = [];
        for (const a of params.closures) {
          closures.push({
            closureId: a.closureId, attempt: a.attempt, fn: a.function,
            args: dataBytes(a.args), inputs: [...a.inputs].map(dataBytes),
          });
        }
        // The reply only acknowledges receipt: run after it.
        setImmediate(() => { for (const c of closures) self.runClosure(c, generation); });
      },
      async cancelClosures(params) {
        self.pushes.cancelClosures++;
        for (const id of params.closureIds) self.cancelled.add(id);
      },
    };
  }

  async heartbeat() {
    const answer = this.dispatcher.workerHeartbeat((p) => {
      const req = p._initRequest();
      req.address = this.options.address;
      req.transferAddress = "";
      req.workerIncarnation = this.incarnation;
      // Every heartbeat carries it (PROTOCOL.md); `noControl` leaves it out,
      // to see what a worker without one gets.
      if (!this.options.noControl) req.control = new Wire.WorkerControl.Client(this.control);
      const current = [...this.tasks.keys()];
      const list = req._initCurrentTasks(current.length);
      current.forEach((id, i) => list.set(i, id));
      req.maxClosures = this.options.maxClosures ?? 0;
      const names = Object.keys(this.functions);
      const fl = req._initFunctions(names.length);
      names.forEach((n, i) => fl.set(i, n));
    });
    const { response } = await this.connection.call(answer);
    this.heartbeats++;
    this.workerId = response.workerId;
    this.onRegistered();
    this.dispatcherIncarnation = response.incarnation;
    if (response.heartbeatIntervalMillis > 0) this.intervalMs = response.heartbeatIntervalMillis;
    this.maxResultBytes = response.maxResultBytes;
    for (const id of response.tasksToDelete) this.tasks.delete(id);
    for (const t of response.newTasks) this.addTask(t, "heartbeat");
  }

  scheduleHeartbeat() {
    if (this.stopped) return;
    this.timer = setTimeout(async () => {
      try {
        await this.heartbeat();
      } catch (e) {
        this.errors.push(e);
      }
      this.scheduleHeartbeat();
    }, this.intervalMs);
  }

  // ---- Tasks and splits ---------------------------------------------------

  addTask(t, via) {
    if (this.tasks.has(t.taskId)) return;  // startTasks and heartbeats may both announce it
    const info = {
      taskId: t.taskId, jobId: t.jobId, datasetId: t.datasetId,
      processingMode: t.processingMode, numSplitProviders: t.numSplitProviders,
    };
    const task = { info, via, state: "running", splits: [], error: null };
    this.tasks.set(t.taskId, task);
    if (info.processingMode === Enums.ProcessingMode.DYNAMIC && this.options.readSplits !== false) {
      this.readSplits(task).catch((e) => { task.error = e; task.state = "failed"; });
    }
  }

  async readSplits(task) {
    const { taskId } = task.info;
    let sequence = 0n;
    for (;;) {
      sequence++;  // PROTOCOL.md: any nonzero start, strictly increasing per (task, provider)
      const answer = await getSplit(this.connection, {
        taskId, repetition: 0n, sequence, maxSplits: this.options.splitBatch ?? 1 });
      task.splits.push(...answer.splits);
      if (answer.endOfSplits) break;
    }
    task.lastSequence = sequence;
    task.state = "read";
    // Nothing is served here (no transfer address), so the task is done.
    await this.completeTask(taskId);
  }

  async completeTask(taskId) {
    await this.connection.call(this.dispatcher.workerUpdate((p) => {
      p.workerId = this.workerId;
      const u = p._initUpdates(1).get(0);
      u.taskId = taskId;
      u.completed = true;
    }));
    const task = this.tasks.get(taskId);
    if (task) task.state = "completed";
  }

  // ---- Closures -----------------------------------------------------------

  async runClosure(c, generation) {
    if (this.cancelled.has(c.closureId)) return;  // cancelled before it started: no report
    const fn = this.functions[c.fn];
    let report;
    this.running++;
    try {
      if (!fn) throw new UserError(`function "${c.fn}" is not registered on this worker`);
      const result = await fn(c.args, c.inputs);
      if (this.maxResultBytes > 0n && BigInt(result.length) > this.maxResultBytes) {
        report = { userError: `result of ${result.length} bytes is over the dispatcher's ` +
                              `limit of ${this.maxResultBytes} bytes (--max-result-bytes)` };
      } else {
        report = { result };
      }
    } catch (e) {
      report = e instanceof UserError ? { userError: e.message }
                                      : { transientError: String(e?.message ?? e) };
    } finally {
      this.running--;
    }
    this.closuresRun++;
    try {
      // runClosures may arrive before the reply of the heartbeat that
      // registered us (the dispatcher pushes right after the registration):
      // a report with workerId 0 would be ignored. Wait for our id.
      await this.registered;
      if (generation !== this.generation) { this.reportsDropped = (this.reportsDropped ?? 0) + 1; return; }
      const reply = await this.connection.call(this.dispatcher.reportClosures((p) => {
        p.workerId = this.workerId;
        const r = p._initReports(1).get(0);
        r.closureId = c.closureId;
        r.attempt = c.attempt;
        if (report.result) setData((n) => r._initResult(n), report.result);
        else if (report.userError !== undefined) r.userError = report.userError;
        else r.transientError = report.transientError;
      }));
      this.reportsIgnored += reply.ignored;
    } catch (e) {
      this.errors.push(e);
    }
  }

  async stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    this.connection.close();
  }
}
