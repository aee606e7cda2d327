#include "reactor/status_page.h"

namespace dispatch::reactor {

const char* StatusPageHtml() {
  return R"PAGE(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>dispatch status</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1em 2em; color: #222; background: #fafafa; }
h1 { font-size: 20px; margin: 0 0 .3em 0; }
h2 { font-size: 16px; margin: 1.2em 0 .4em 0; }
#summary span { margin-right: 1.5em; }
.bad { color: #b00020; font-weight: bold; }
.ok { color: #1b7f2a; font-weight: bold; }
table { border-collapse: collapse; background: #fff; }
th, td { border: 1px solid #ddd; padding: 2px 8px; text-align: left; font-variant-numeric: tabular-nums; }
th { background: #eee; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
.plot { background: #fff; border: 1px solid #ddd; padding: 4px; }
.plot div { font-size: 12px; color: #555; }
.note { color: #666; font-size: 12px; }
#error { color: #b00020; }
</style>
</head>
<body>
<h1>dispatch <span id="version"></span></h1>
<div id="summary"></div>
<div id="error"></div>
<div id="tokenbox" hidden>Token: <input id="token" type="password"> <button id="tokenset">use</button></div>
<h2>Last minutes</h2>
<div class="plots">
  <div class="plot"><div>closures finished / s</div><canvas id="plot-closures" width="360" height="120"></canvas></div>
  <div class="plot"><div>commit latency ms (p50 blue, p99 red)</div><canvas id="plot-commit" width="360" height="120"></canvas></div>
  <div class="plot"><div>worker heartbeats / s</div><canvas id="plot-heartbeats" width="360" height="120"></canvas></div>
  <div class="plot"><div>loop lag ms (housekeeping timer)</div><canvas id="plot-lag" width="360" height="120"></canvas></div>
</div>
<h2>Workers <span id="workers-count" class="note"></span></h2>
<table id="workers"><thead><tr><th>id</th><th>address</th><th>connected</th><th>last heartbeat</th>
<th>tasks</th><th>closure slots</th><th>running closures</th></tr></thead><tbody></tbody></table>
<h2>Jobs <span id="jobs-count" class="note"></span></h2>
<table id="jobs"><thead><tr><th>id</th><th>name</th><th>mode</th><th>state</th><th>consumers</th>
<th>tasks (worker)</th></tr></thead><tbody></tbody></table>
<h2>Closures <span id="closures-total" class="note"></span> <span id="closures-stuck" class="bad"></span></h2>
<table id="coordinators"><thead><tr><th>coordinator</th><th>waiting</th><th>queued</th><th>assigned</th>
<th>finished</th><th>failed</th><th>cancelled</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
const STATES = ["waiting", "queued", "assigned", "finished", "failed", "cancelled"];
let token = sessionStorage.getItem("dispatch-token") || "";
const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
if (m) { token = decodeURIComponent(m[1]); sessionStorage.setItem("dispatch-token", token); }
document.getElementById("tokenset").onclick = () => {
  token = document.getElementById("token").value;
  sessionStorage.setItem("dispatch-token", token);
  refresh();
};
function el(tag, text) { const e = document.createElement(tag); e.textContent = text; return e; }
function row(cells) { const tr = document.createElement("tr"); for (const c of cells) tr.appendChild(el("td", c)); return tr; }
function fill(id, rows) { const body = document.querySelector("#" + id + " tbody"); body.replaceChildren(...rows); }
function duration(s) {
  if (s < 120) return s.toFixed(0) + " s";
  if (s < 7200) return (s / 60).toFixed(0) + " min";
  return (s / 3600).toFixed(1) + " h";
}
// Draws one or more series (same length) on a canvas; marks it drawn.
function plot(id, series, colors) {
  const c = document.getElementById(id), g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  const n = series[0].length;
  let max = 0;
  for (const s of series) for (const v of s) max = Math.max(max, v);
  if (max <= 0) max = 1;
  g.strokeStyle = "#ccc"; g.strokeRect(0.5, 0.5, c.width - 1, c.height - 1);
  g.fillStyle = "#555"; g.font = "11px sans-serif"; g.fillText(max.toPrecision(3), 4, 12);
  series.forEach((s, k) => {
    g.strokeStyle = colors[k]; g.lineWidth = 1.5; g.beginPath();
    for (let i = 0; i < n; i++) {
      const x = n <= 1 ? c.width / 2 : i * (c.width - 2) / (n - 1) + 1;
      const y = c.height - 2 - (s[i] / max) * (c.height - 16);
      if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
    }
    g.stroke();
  });
  c.dataset.points = String(n);
}
function render(s) {
  document.getElementById("version").textContent = s.version;
  const summary = document.getElementById("summary");
  summary.replaceChildren(
    el("span", "incarnation " + s.incarnation),
    el("span", "up " + duration(s.uptimeSeconds)),
    el("span", s.ready ? "ready" : "not ready: " + s.notReadyBecause),
    el("span", (s.residentBytes / 1048576).toFixed(1) + " MiB resident"),
    el("span", s.connectionsOpen + " connections"));
  summary.children[2].className = s.ready ? "ok" : "bad";
  const workers = s.workers || [];
  fill("workers", workers.map(w => row([w.id, w.address, w.connected ? "yes" : "no",
    w.secondsSinceHeartbeat == null ? "never" : duration(w.secondsSinceHeartbeat) + " ago",
    w.tasks, w.closureSlots, w.runningClosures])));
  document.getElementById("workers-count").textContent =
    (s.workersTotal || 0) + " registered" + (workers.length < (s.workersTotal || 0) ? ", first " + workers.length + " shown" : "");
  const jobs = s.jobs || [];
  fill("jobs", jobs.map(j => row([j.id, j.name, j.processingMode,
    j.garbageCollected ? "garbage-collected" : (j.finished ? "finished" : "running"), j.consumers,
    j.tasks.map(t => t.id + " (" + t.worker + (t.finished ? ", finished" : "") + ")").join(", ") +
      (j.tasks.length < j.tasksTotal ? " ... " + j.tasksTotal + " in all" : "")])));
  document.getElementById("jobs-count").textContent =
    (s.jobsTotal || 0) + " in all" + (jobs.length < (s.jobsTotal || 0) ? ", first " + jobs.length + " shown" : "");
  const coordinators = s.coordinators || [];
  fill("coordinators", coordinators.map(c => row([c.id, ...STATES.map(k => c[k])])));
  const all = s.closures || {};
  document.getElementById("closures-total").textContent =
    STATES.map(k => (all[k] || 0) + " " + k).join(", ") +
    (coordinators.length < (s.coordinatorsTotal || 0) ? "; first " + coordinators.length + " coordinators shown" : "");
  document.getElementById("closures-stuck").textContent = s.closuresStuck > 0
    ? s.closuresStuck + " stuck: running, none finished for --stuck-closure-warning-ms (see the log)" : "";
  const h = s.history;
  if (h && h.unixSeconds.length > 0) {
    plot("plot-closures", [h.closuresFinishedPerSecond], ["#1b7f2a"]);
    plot("plot-commit", [h.commitP50Ms, h.commitP99Ms], ["#1f5fbf", "#b00020"]);
    plot("plot-heartbeats", [h.heartbeatsPerSecond], ["#7a4fbf"]);
    plot("plot-lag", [h.loopLagMs], ["#bf7a1f"]);
  }
  document.body.dataset.rendered = String(Number(document.body.dataset.rendered || 0) + 1);
}
async function refresh() {
  try {
    const r = await fetch("api/status", { headers: token ? { Authorization: "Bearer " + token } : {} });
    if (r.status === 401) {
      document.getElementById("tokenbox").hidden = false;
      document.getElementById("error").textContent = "this dispatcher needs its token (or open /#token=TOKEN)";
      return;
    }
    if (!r.ok) throw new Error("HTTP " + r.status);
    document.getElementById("error").textContent = "";
    document.getElementById("tokenbox").hidden = true;
    render(await r.json());
  } catch (e) {
    document.getElementById("error").textContent = "cannot reach the dispatcher: " + e.message;
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
)PAGE";
}

}  // namespace dispatch::reactor
