// The status page: fetches /api/v1/ui/status every REFRESH_MS and redraws; no build step.
"use strict";
const REFRESH_MS = 2000;
let paused = false, timer = null, peakUnder = 0, lastUnder = 0;
const lastAdds = new Map();  // bookie -> [time ms, addEntries counter]

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function size(n) {
  if (n === null || n === undefined) return "\u2013";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}
function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function drawBookies(s) {
  const rows = s.bookies.map(b => {
    const tr = el("tr");
    tr.dataset.bookie = b.bookie_id;
    tr.dataset.state = b.state;
    if (b.state === "down") tr.className = "bad";
    else if (b.state === "readonly" || b.state === "decommissioning") tr.className = "warn";
    let rate = "\u2013";
    if (b.add_entries !== null && b.add_entries !== undefined) {
      const prev = lastAdds.get(b.bookie_id);
      if (prev && s.time_ms > prev[0]) rate = ((b.add_entries - prev[1]) * 1000 / (s.time_ms - prev[0])).toFixed(1);
      lastAdds.set(b.bookie_id, [s.time_ms, b.add_entries]);
    }
    const stateCell = el("td", b.state + (b.state === "down" ? " \u2717" : ""), "state-" + b.state);
    if (b.error && b.state === "down") stateCell.title = b.error;
    tr.append(el("th", b.bookie_id), stateCell, el("td", b.rack || "\u2013"),
      el("td", b.ledgers ?? "\u2013", "num"), el("td", size(b.disk_used_bytes), "num"),
      el("td", size(b.disk_free_bytes), "num"), el("td", rate, "num"));
    tr.firstChild.scope = "row";
    const api = el("td");
    if (b.http_port && b.state !== "down") {
      const a = el("a", "info");
      a.href = location.protocol + "//" + b.bookie_id.replace(/:\d+$/, "") + ":" + b.http_port + "/api/v1/bookie/info";
      api.append(a);
    } else api.textContent = "\u2013";
    tr.append(api);
    return tr;
  });
  fill(document.querySelector("#bookies tbody"), rows);
}

function drawAutoRecovery(s) {
  const ar = s.autorecovery;
  const aud = document.getElementById("ar-auditor");
  aud.textContent = ar.auditor || "none elected";
  aud.className = ar.auditor ? "" : "bad";
  document.getElementById("ar-workers").textContent = ar.workers.length ? ar.workers.join(", ") : "none";
  const under = ar.under_replicated;
  const u = document.getElementById("ar-under");
  u.textContent = under;
  u.className = under ? "bad" : "";
  // an episode starts when ledgers get marked again; its peak is what re-replication works off
  peakUnder = (lastUnder === 0 && under > 0) ? under : Math.max(peakUnder, under);
  lastUnder = under;
  const p = document.getElementById("ar-progress");
  p.max = Math.max(peakUnder, 1);
  p.value = peakUnder ? peakUnder - under : 1;
  document.getElementById("ar-progress-text").textContent = !peakUnder ? "nothing to re-replicate"
    : under ? `${peakUnder - under} of ${peakUnder} ledgers re-replicated`
    : `all ${peakUnder} ledgers re-replicated`;
  fill(document.querySelector("#under tbody"), s.under_replicated.map(r => {
    const tr = el("tr", null, "bad");
    tr.append(el("td", r.ledger, "num"), el("td", r.missing.join(", ")), el("td", r.lock_holder || "\u2013"));
    return tr;
  }));
}

function drawLogs(s) {
  fill(document.querySelector("#logs tbody"), s.logs.map(l => {
    const tr = el("tr", null, l.writer === "gone" ? "bad" : "");
    tr.append(el("th", l.log), el("td", l.ledgers, "num"), el("td", size(l.bytes), "num"),
      el("td", l.writer + (l.open_ledger !== null ? ` (ledger ${l.open_ledger} open)` : "")));
    tr.firstChild.scope = "row";
    return tr;
  }));
  fill(document.querySelector("#streams tbody"), s.streams.map(q => {
    const tr = el("tr", null, q.error ? "bad" : "");
    tr.append(el("td", q.checkpoint), el("td", q.log || "\u2013"),
      el("td", q.error ? q.error : q.batch), el("td", q.lag_entries ?? "\u2013", "num"),
      el("td", size(q.lag_bytes), "num"));
    return tr;
  }));
}

function drawProblems(s) {
  const list = document.getElementById("problem-list");
  if (!s.problems.length) { fill(list, [el("li", "none: all is well", "ok")]); return; }
  fill(list, s.problems.map(p => {
    const li = el("li", p.what + " \u2014 fix: ", "bad");
    li.append(el("code", p.fix));
    return li;
  }));
}

async function refresh() {
  clearTimeout(timer);
  try {
    const resp = await fetch("/api/v1/ui/status", {cache: "no-store"});
    const s = await resp.json();
    if (!resp.ok) throw new Error(s.error || resp.statusText);
    const ci = s.cluster_info;
    document.getElementById("cluster").textContent =
      `${s.metadata_service_uri}: ${ci.totalBookiesCount} bookies (${ci.writableBookiesCount} rw, ` +
      `${ci.readonlyBookiesCount} readonly, ${ci.unavailableBookiesCount} down)`;
    drawBookies(s); drawAutoRecovery(s); drawLogs(s); drawProblems(s);
    document.getElementById("updated").textContent = "updated " + new Date(s.time_ms).toLocaleTimeString();
    document.body.dataset.updated = String(s.time_ms);
  } catch (err) {
    fill(document.getElementById("problem-list"),
         [el("li", "cannot reach the status API: " + err.message + " \u2014 is the server up?", "bad")]);
  }
  if (!paused) timer = setTimeout(refresh, REFRESH_MS);
}

document.getElementById("refresh").addEventListener("click", refresh);
document.getElementById("pause").addEventListener("click", e => {
  paused = !paused;
  e.target.setAttribute("aria-pressed", String(paused));
  e.target.textContent = paused ? "Resume auto-refresh" : "Pause auto-refresh";
  if (!paused) refresh(); else clearTimeout(timer);
});
refresh();
