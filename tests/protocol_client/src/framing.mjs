// A capnp-es RPC Transport over a Node stream socket. capnp-es ships the RPC
// connection (Conn) but no socket transport: this file frames messages with
// Cap'n Proto's standard stream framing (little-endian: segment count - 1,
// each segment's size in words, padding to 8 bytes, then the segments,
// unpacked), which is what the dispatcher speaks over TCP and Unix sockets.

import * as capnp from "capnp-es";
import { Message as RpcMessage } from "capnp-es/capnp/rpc";

// A frame larger than this is refused (the connection is closed): a client's
// own guard against a peer that would make it buffer without bound. The
// dispatcher's replies stay far below (--max-message-bytes, 64 MiB at most).
export const kMaxFrameBytes = 256 * 1024 * 1024;
const kMaxSegments = 512;

export class SocketTransport {
  constructor(socket) {
    this.socket = socket;
    this.chunks = [];
    this.bufferedBytes = 0;
    this.inbox = [];
    this.waiters = [];
    this.closed = false;
    this.closeReason = undefined;
    socket.on("data", (chunk) => this.onData(chunk));
    socket.on("close", () => this.finish(this.closeReason ?? new Error("connection closed")));
    socket.on("error", (e) => { this.closeReason = e; });
  }

  onData(chunk) {
    this.chunks.push(chunk);
    this.bufferedBytes += chunk.length;
    for (;;) {
      const frameBytes = this.nextFrameBytes();
      if (frameBytes === 0 || this.bufferedBytes < frameBytes) return;
      const all = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks);
      const frame = all.subarray(0, frameBytes);
      const rest = all.subarray(frameBytes);
      this.chunks = rest.length > 0 ? [rest] : [];
      this.bufferedBytes = rest.length;
      // Copy into an ArrayBuffer of its own: the message keeps views into it.
      const copy = new Uint8Array(frameBytes);
      copy.set(frame);
      let root;
      try {
        root = new capnp.Message(copy.buffer, false).getRoot(RpcMessage);
      } catch (e) {
        this.fail(new Error(`malformed frame from the dispatcher: ${e.message}`));
        return;
      }
      const waiter = this.waiters.shift();
      if (waiter) waiter.resolve(root); else this.inbox.push(root);
    }
  }

  // The whole frame's size once its segment table is in, else 0.
  nextFrameBytes() {
    if (this.bufferedBytes < 4) return 0;
    const head = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks);
    this.chunks = [head];
    const segments = head.readUInt32LE(0) + 1;
    if (segments > kMaxSegments) {
      this.fail(new Error(`frame of ${segments} segments (limit ${kMaxSegments})`));
      return 0;
    }
    const tableBytes = 4 + 4 * segments + (segments % 2 === 0 ? 4 : 0);
    if (head.length < tableBytes) return 0;
    let words = 0;
    for (let i = 0; i < segments; i++) words += head.readUInt32LE(4 + 4 * i);
    const total = tableBytes + words * 8;
    if (total > kMaxFrameBytes) {
      this.fail(new Error(`frame of ${total} bytes (limit ${kMaxFrameBytes})`));
      return 0;
    }
    return total;
  }

  fail(error) {
    this.closeReason = error;
    this.socket.destroy();
    this.finish(error);
  }

  finish(error) {
    if (this.closed) return;
    this.closed = true;
    this.closeReason = error;
    for (const w of this.waiters) w.reject(undefined);  // Conn.work() ends on undefined
    this.waiters = [];
  }

  sendMessage(msg) {
    if (this.closed) return;
    this.socket.write(new Uint8Array(msg.segment.message.toArrayBuffer()));
  }

  recvMessage() {
    if (this.inbox.length > 0) return Promise.resolve(this.inbox.shift());
    if (this.closed) return Promise.reject(undefined);
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  close() {
    if (!this.closed) this.socket.end();
    this.finish(new Error("closed by this client"));
  }
}
