// One authenticated connection to the dispatcher (PROTOCOL.md, "Transport and
// authentication"): two-party Cap'n Proto RPC over TCP or a Unix socket, whose
// bootstrap capability is a Gateway; authenticate(token) hands out the
// Dispatcher of this connection.

import * as net from "node:net";
import * as capnp from "capnp-es";
import { SocketTransport } from "./framing.mjs";
import { Wire } from "./schema.mjs";

// "tcp:HOST:PORT" or "unix:PATH" (docs/operators/running.md, --listen).
export function parseAddress(address) {
  if (address.startsWith("unix:")) return { path: address.slice(5) };
  const m = /^tcp:(.*):(\d+)$/.exec(address);
  if (!m) throw new Error(`address "${address}" is neither tcp:HOST:PORT nor unix:PATH`);
  return { host: m[1].replace(/^\[(.*)\]$/, "$1"), port: Number(m[2]) };
}

export function connectSocket(address) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(parseAddress(address), () => {
      socket.off("error", reject);
      resolve(socket);
    });
    socket.once("error", reject);
  });
}

// Fills a Data field through its init function (capnp-es has no setter from bytes).
export function setData(initField, bytes) {
  const data = initField(bytes.length);
  if (bytes.length > 0) data.copyBuffer(bytes);
}

export function dataBytes(data) {
  return new Uint8Array(data.toArrayBuffer());
}

// The error contract (PROTOCOL.md, "Errors"): a dispatcher error's text is
// "<CodeName>: <message>". capnp-es wraps it ("CAPNP-TS116 RPC method failed
// at I.m(): <reason>"); a dropped connection is our own "disconnected" error.
const kCodes = ["InvalidArgument", "NotFound", "AlreadyExists", "FailedPrecondition",
  "ResourceExhausted", "Unavailable", "DataLoss", "Internal", "Unauthenticated",
  "Cancelled", "DeadlineExceeded"];
const kCodePattern = new RegExp(`(?:^|: |remote exception: )(${kCodes.join("|")}): (.*)$`, "s");

export class DisconnectedError extends Error {}

export function errorCode(error) {
  if (error instanceof DisconnectedError) return { code: "Unavailable", message: error.message };
  const text = String(error?.message ?? error);
  const m = kCodePattern.exec(text);
  if (m) return { code: m[1], message: m[2] };
  if (/unimplemented/i.test(text)) return { code: "InvalidArgument", message: text };
  if (/disconnected|overloaded/i.test(text)) {
    return { code: /overloaded/i.test(text) ? "ResourceExhausted" : "Unavailable", message: text };
  }
  return { code: "Internal", message: text };
}

export class DispatcherConnection {
  static async open(address, token = new Uint8Array(0)) {
    const socket = await connectSocket(address);
    const c = new DispatcherConnection(socket);
    await c.authenticate(token);
    return c;
  }

  constructor(socket) {
    this.socket = socket;
    this.transport = new SocketTransport(socket);
    this.conn = new capnp.Conn(this.transport);
    this.conn.onError = (e) => this.onConnError(e);
    this.closed = false;
    this.closeListeners = [];
    socket.on("close", () => this.onClosed());
    this.gateway = this.conn.bootstrap(Wire.Gateway);
    this.dispatcher = null;
  }

  async authenticate(token) {
    const answer = this.gateway.authenticate((p) => setData((n) => p._initToken(n), token));
    await this.call(answer);
    this.dispatcher = answer.getDispatcher();
    return this.dispatcher;
  }

  // Awaits a capnp-es answer promise, turning a dropped connection into
  // DisconnectedError (capnp-es itself leaves such calls pending forever).
  async call(answer) {
    if (this.closed) throw new DisconnectedError("the connection to the dispatcher is closed");
    return await answer.promise();
  }

  onConnError(e) {
    if (!this.closed) this.transport.fail(e instanceof Error ? e : new Error(String(e)));
  }

  onClosed() {
    if (this.closed) return;
    this.closed = true;
    const error = new DisconnectedError(
      `disconnected: the connection to the dispatcher closed (${this.transport.closeReason?.message ?? "eof"})`);
    for (const q of this.conn.questions) {
      if (q && q.state === 0 /* IN_PROGRESS */) {
        try { q.reject(error); } catch { /* already settled */ }
      }
    }
    for (const f of this.closeListeners) f(error);
  }

  onClose(listener) { this.closeListeners.push(listener); }

  close() {
    this.transport.close();
    this.socket.destroy();
  }
}
