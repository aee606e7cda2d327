// The consumer's side of the data service (PROTOCOL.md, "The consumer life
// cycle"), as far as this client needs it: register a dataset with a split
// source, create a job (and its job client), heartbeat the job client, release it.

import { dataBytes, setData } from "./connection.mjs";
import * as capnp from "capnp-es";
import { Enums, Wire } from "./schema.mjs";

// A Data pointer holding `bytes`, in a message of its own: capnp-es sets a
// List(Data) element only by copying from another Data pointer.
function scratchData(bytes) {
  const holder = new capnp.Message().initRoot(Wire.Split);
  setData((n) => holder._initPayload(n), bytes);
  return holder.payload;
}

// splitSource: { indexed: N } | { explicit: [Uint8Array...] } | undefined (none).
export async function registerDataset(connection, { definition, splitSource, metadata }) {
  const reply = await connection.call(connection.dispatcher.getOrRegisterDataset((p) => {
    setData((n) => p._initDefinition(n), definition);
    const s = p._initSplitSource();
    if (splitSource?.indexed !== undefined) {
      s.indexed = BigInt(splitSource.indexed);
    } else if (splitSource?.explicit) {
      const l = s._initExplicit(splitSource.explicit.length);
      splitSource.explicit.forEach((bytes, i) => l.set(i, scratchData(bytes)));
    } else {
      s.none = true;
    }
    setData((n) => p._initElementSpec(n), new Uint8Array(0));
    setData((n) => p._initMetadata(n), metadata ?? new Uint8Array(0));
  }));
  return reply.datasetId;
}

export async function createJob(connection, { datasetId, mode = "DYNAMIC", jobName = "",
                                              jobNameIndex = 0n, numConsumers = 0,
                                              requeueUnfinishedSplits = false }) {
  const reply = await connection.call(connection.dispatcher.getOrCreateJob((p) => {
    const r = p._initRequest();
    r.datasetId = datasetId;
    r.processingMode = Enums.ProcessingMode[mode];
    r.jobName = jobName;
    r.jobNameIndex = jobNameIndex;
    r.numConsumers = numConsumers;
    r.targetWorkers = Enums.TargetWorkers.AUTO;
    r.requeueUnfinishedSplits = requeueUnfinishedSplits;
  }));
  return { jobId: reply.jobId, jobClientId: reply.jobClientId };
}

export async function clientHeartbeat(connection, jobClientId, knownTaskListVersion = 0n) {
  const { response } = await connection.call(connection.dispatcher.clientHeartbeat((p) => {
    const r = p._initRequest();
    r.jobClientId = jobClientId;
    r.currentRound = -1n;
    r.blockedRound = -1n;
    r.knownTaskListVersion = knownTaskListVersion;
  }));
  return {
    taskListVersion: response.taskListVersion,
    taskListChanged: response.taskListChanged,
    tasks: [...response.tasks].map((t) => ({ taskId: t.taskId, workerAddress: t.workerAddress,
                                             finished: t.finished })),
    jobFinished: response.jobFinished,
  };
}

export async function releaseJobClient(connection, jobClientId) {
  await connection.call(connection.dispatcher.releaseJobClient((p) => { p.jobClientId = jobClientId; }));
}

export async function getSplit(connection, { taskId, repetition = 0n, sequence, maxSplits = 1 }) {
  const { response } = await connection.call(connection.dispatcher.getSplit((p) => {
    const r = p._initRequest();
    r.taskId = taskId;
    r.repetition = repetition;
    r.providerIndex = 0;
    r.sequence = sequence;
    r.maxSplits = maxSplits;
  }));
  return {
    splits: [...response.splits].map((s) => ({ index: s.index, payload: dataBytes(s.payload) })),
    endOfSplits: response.endOfSplits,
    repetition: response.repetition,
  };
}
