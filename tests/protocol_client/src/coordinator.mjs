// A coordinator (PROTOCOL.md, "The coordinator life cycle"): one session of
// coordinator `coordinatorId` on its own connection; schedules closures with
// request ids (the idempotency key), collects outcomes with awaitResults,
// releasing every outcome it holds in the next call, and hands each closure's
// outcome to its user once (outcomes may repeat across sessions).

import * as crypto from "node:crypto";
import { DispatcherConnection, dataBytes, setData } from "./connection.mjs";
import { Enums } from "./schema.mjs";

export const kInputInCall = 1n << 63n;

export class Coordinator {
  static async open(dispatcherAddress, coordinatorId, token) {
    const connection = await DispatcherConnection.open(dispatcherAddress, token);
    const c = new Coordinator(connection, coordinatorId);
    const answer = connection.dispatcher.openCoordinator((p) => { p.coordinatorId = coordinatorId; });
    await connection.call(answer);
    c.session = answer.getCoordinator();
    return c;
  }

  // A new session of the same coordinator on a new connection (after a drop or
  // a dispatcher restart). Outcomes already handed over stay handed over: the
  // new session repeats every unreleased one, and those are dropped (and
  // released) as duplicates.
  async reopen(dispatcherAddress, token) {
    this.connection.close();
    this.connection = await DispatcherConnection.open(dispatcherAddress, token);
    const answer = this.connection.dispatcher.openCoordinator((p) => { p.coordinatorId = this.coordinatorId; });
    const reply = await this.connection.call(answer);
    this.session = answer.getCoordinator();
    this.toRelease = [];
    return reply.incarnation;
  }

  constructor(connection, coordinatorId) {
    this.connection = connection;
    this.coordinatorId = coordinatorId;
    this.nextRequestId = crypto.randomBytes(4).readUInt32LE(0) + 1;  // nonzero, unique per call
    this.outcomes = new Map();  // closureId -> outcome, each handed over once
    this.toRelease = [];
    this.duplicates = 0;
  }

  // specs: [{ fn, args: Uint8Array, priority?, timeoutMs?, inputs?: bigint[], requestId? }]
  // Returns { ids, error } (error: the coordinator's first error, or null).
  async schedule(specs) {
    for (const s of specs) if (s.requestId === undefined) s.requestId = BigInt(this.nextRequestId++);
    const reply = await this.connection.call(this.session.schedule((p) => {
      const list = p._initClosures(specs.length);
      specs.forEach((s, i) => {
        const c = list.get(i);
        c.function = s.fn;
        setData((n) => c._initArgs(n), s.args ?? new Uint8Array(0));
        c.requestId = s.requestId;
        c.priority = s.priority ?? 0;
        c.timeoutMs = s.timeoutMs ?? 0;
        const inputs = s.inputs ?? [];
        const il = c._initInputs(inputs.length);
        inputs.forEach((v, j) => il.set(j, v));
      });
    }));
    return { ids: [...reply.closureIds], error: firstError(reply.error) };
  }

  // One awaitResults call: releases what we hold, returns the outcomes new to
  // us (a repeated one is counted and dropped).
  async awaitSome(maxResults = 0) {
    const release = this.toRelease;
    this.toRelease = [];
    const reply = await this.connection.call(this.session.awaitResults((p) => {
      const l = p._initRelease(release.length);
      release.forEach((id, i) => l.set(i, id));
      p.maxResults = maxResults;
    }));
    const fresh = [];
    for (const o of reply.results) {
      const outcome = readOutcome(o);
      this.toRelease.push(outcome.closureId);
      if (this.outcomes.has(outcome.closureId)) { this.duplicates++; continue; }
      this.outcomes.set(outcome.closureId, outcome);
      fresh.push(outcome);
    }
    return fresh;
  }

  // Waits until every id in `ids` has an outcome; returns them in order.
  async fetchAll(ids) {
    while (ids.some((id) => !this.outcomes.has(id))) await this.awaitSome();
    return ids.map((id) => this.outcomes.get(id));
  }

  async join(wait = true) {
    const reply = await this.connection.call(this.session.join((p) => { p.wait = wait; }));
    return { done: reply.done, error: firstError(reply.error), unfinished: reply.unfinished };
  }

  async getOutcomes(ids) {
    const reply = await this.connection.call(this.session.getOutcomes((p) => {
      const l = p._initClosureIds(ids.length);
      ids.forEach((id, i) => l.set(i, id));
    }));
    return [...reply.outcomes].map(readOutcome);
  }

  async cancel(ids) {
    const reply = await this.connection.call(this.session.cancel((p) => {
      const l = p._initClosureIds(ids.length);
      ids.forEach((id, i) => l.set(i, id));
    }));
    return [...reply.states].map((v) => kStateNames[v] ?? `state ${v}`);
  }

  close() { this.connection.close(); }
}

function firstError(e) {
  return e.closureId === 0n ? null : { closureId: e.closureId, message: e.message };
}

const kStateNames = Object.fromEntries(Object.entries(Enums.ClosureState).map(([k, v]) => [v, k]));

function readOutcome(o) {
  return {
    closureId: o.closureId,
    state: kStateNames[o.state] ?? `state ${o.state}`,
    result: dataBytes(o.result),
    error: o.error,
    userError: o.userError,
    attempts: o.attempts,
    deadlineExceeded: o.deadlineExceeded,
  };
}
