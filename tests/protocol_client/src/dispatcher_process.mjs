// Starts the real dispatcher binary for a test: a fresh work dir, a port the
// kernel picks (--listen=tcp:127.0.0.1:0), and the address read from its one
// start line on stdout, "dispatcher listening on ADDRESS"
// (docs/operators/running.md).

import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

// options.workDir and options.listen restart a dispatcher where an earlier one ran.
export async function startDispatcher(extraFlags = [], options = {}) {
  const { startTimeoutMs = 60000 } = options;
  const binary = process.env.DISPATCHER_BIN;
  if (!binary) throw new Error("DISPATCHER_BIN is not set (the CMake test passes build/reactor/dispatcher)");
  const workDir = options.workDir ?? fs.mkdtempSync(path.join(os.tmpdir(), "protocol-client-"));
  const listen = options.listen ?? "tcp:127.0.0.1:0";
  // --http on a port the kernel picks: never the default 8050 (suites share the machine).
  const child = spawn(binary, [`--listen=${listen}`, "--http=tcp:127.0.0.1:0", `--work-dir=${workDir}`,
                               "--log-level=warning", ...extraFlags],
                      { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d) => { stderr += d; if (stderr.length > 65536) stderr = stderr.slice(-65536); });
  const address = await new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(
      `dispatcher printed no start line within ${startTimeoutMs} ms; stderr: ${stderr}`)), startTimeoutMs);
    child.stdout.on("data", (d) => {
      out += d;
      const m = /dispatcher listening on (\S+)/.exec(out);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`dispatcher exited with ${code} before listening; stderr: ${stderr}`));
    });
  });
  return {
    address,
    workDir,
    child,
    stderr: () => stderr,
    // kill -9: nothing is flushed or closed; the work dir stays for a restart.
    async crash() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGKILL");
        await exited;
      }
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        await exited;
      }
      fs.rmSync(workDir, { recursive: true, force: true });
    },
  };
}

// Polls `condition` (sync or async) until it is truthy or `deadlineMs` passes.
export async function waitUntil(condition, what, deadlineMs = 30000, betweenMs = 10) {
  const end = Date.now() + deadlineMs;
  for (;;) {
    const v = await condition();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, betweenMs));
  }
}
