// The dashboard: it renders the node's status document from the /events stream (a complete
// snapshot per event) and the mesh view from /mesh, and keeps a few minutes of history for
// its charts. EventSource reconnects by itself; a stream the server refused is opened again.
"use strict";

const WINDOW_MS = 5 * 60 * 1000; // what the charts show
const MESH_EVERY_MS = 3000;
const history = []; // {t, calls, spots, bytes}
let lastTurns = null; // {t, turns}: the sample the rate is measured from
let callsPerSecond = 0;

const $ = (id) => document.getElementById(id);

function text(id, v) { $(id).textContent = v; }

function badge(el, state) {
  el.textContent = state || "";
  el.dataset.state = state || "";
}

function bytes(n) {
  if (n == null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
}

function num(n) { return n == null ? "–" : Number(n).toLocaleString("en-US"); }

function yesNo(b) { return b ? "yes" : "no"; }

function setBar(id, used, total) {
  const el = $(id);
  const pct = total > 0 ? Math.min(100, (100 * used) / total) : 0;
  el.style.width = pct.toFixed(1) + "%";
  el.classList.toggle("warn", pct >= 70 && pct < 90);
  el.classList.toggle("hot", pct >= 90);
}

function cell(tr, value, cls) {
  const td = document.createElement("td");
  if (value instanceof Node) td.appendChild(value); else td.textContent = value;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function badgeEl(state) {
  const b = document.createElement("span");
  b.className = "badge small";
  badge(b, state);
  return b;
}

function fillRows(tbody, rows, cols, emptyText) {
  tbody.replaceChildren();
  if (rows.length === 0) {
    const tr = document.createElement("tr");
    tr.className = "empty";
    const td = cell(tr, emptyText);
    td.colSpan = cols;
    tbody.appendChild(tr);
    return;
  }
  rows.forEach((tr) => tbody.appendChild(tr));
}

function render(s) {
  document.title = s.node + " · " + s.runtime.state + " · ZLink";
  text("node", s.node);
  badge($("state-badge"), s.runtime.state);
  text("meta", "mesh " + s.mesh + " · version " + s.applicationVersion);

  const rt = s.runtime;
  text("rt-ready", yesNo(rt.isReady));
  text("rt-accepting", yesNo(rt.acceptingWork));
  text("rt-safe", yesNo(rt.safeToShutdown));
  text("rt-deadline", rt.deadline ? new Date(rt.deadline).toLocaleTimeString() : "none");
  const rr = rt.relocationResult;
  text("rt-relocation", rr ? rr.outcome + (rr.reason !== "None" ? " / " + rr.reason : "") + " (v" + rr.targetApplicationVersion + ")" : "none");
  const tr = rt.terminationResult;
  text("rt-termination", tr ? tr.outcome + (tr.reason !== "None" ? " / " + tr.reason : "") : "none");

  const m = s.meshStatus;
  badge($("mesh-badge"), m.state);
  text("mesh-ready", m.readyPeerCount + " of " + m.peers.length);
  const p = m.placement;
  text("placement", p.isAvailable ? "available" : "unavailable" + (p.unavailableReason ? " (" + p.unavailableReason + ")" : ""));
  text("spots", num(p.activeSpotCount));
  text("actors", num(p.activeActorCount));

  const h = s.capacity.coreHwm;
  const q = s.capacity.applicationJobQueue;
  text("hwm-text", bytes(h.totalMessagingAccountedBytes) + " of " + bytes(h.effectiveBudgetBytes));
  setBar("hwm-bar", h.totalMessagingAccountedBytes, h.effectiveBudgetBytes);
  text("jobs-text", num(q.permitsInUse) + " of " + num(q.effectiveMaxQueuedApplicationJobs));
  setBar("jobs-bar", q.permitsInUse, q.effectiveMaxQueuedApplicationJobs);
  text("pressure", q.pressureState);
  text("hwm-peak", bytes(h.peakAccountedBytes));
  text("lane-bytes", bytes(h.totalInstanceAccountedBytes));

  renderRelocation(s.relocation);
  renderPeers(m.peers);
  renderChannels(s);
  sample(s);
}

function renderRelocation(r) {
  const sec = $("relocation");
  if (!r) { sec.hidden = true; return; }
  sec.hidden = false;
  const state = r.running ? "Relocating" : r.result ? (r.result.outcome === "Relocated" ? "Relocated" : "Blocked") : "";
  badge($("reloc-badge"), state);
  let what = r.mode + " to version " + r.targetApplicationVersion;
  if (r.result) what += " · " + r.result.outcome + (r.result.reason !== "None" ? " / " + r.result.reason : "");
  text("reloc-text", what);
  text("reloc-count", num(r.moved) + " of " + num(r.units) + " units moved" + (r.gone ? ", " + num(r.gone) + " gone" : ""));
  setBar("reloc-bar", r.moved + r.gone, r.units);
}

function renderPeers(peers) {
  const rows = peers.map((p) => {
    const tr = document.createElement("tr");
    tr.dataset.node = p.node;
    tr.dataset.state = p.state;
    cell(tr, p.node);
    cell(tr, badgeEl(p.state));
    cell(tr, p.unavailableReason || "");
    return tr;
  });
  fillRows($("peers"), rows, 3, "no peers");
}

function renderChannels(s) {
  const rows = [];
  for (const c of s.channels.clientServer) {
    const tr = document.createElement("tr");
    tr.dataset.channel = c.name;
    cell(tr, c.name);
    cell(tr, "ClientServer · " + c.localRole);
    cell(tr, badgeEl(c.state));
    cell(tr, String(c.readyTargetCount));
    cell(tr, c.targets.map((t) => t.node + " ×" + t.weight + " " + t.state).join(", "));
    rows.push(tr);
  }
  for (const f of s.channels.fanout) {
    const tr = document.createElement("tr");
    tr.dataset.channel = f.name;
    cell(tr, f.name);
    cell(tr, "Fanout · subscriber");
    cell(tr, badgeEl(f.state));
    cell(tr, String(f.readyPublisherCount));
    cell(tr, f.publishers.map((p) => p.node + " " + p.state).join(", "));
    rows.push(tr);
  }
  const known = new Set(rows.map((r) => r.dataset.channel));
  for (const c of s.meshStatus.channels) {
    if (known.has(c.name)) continue;
    const tr = document.createElement("tr");
    tr.dataset.channel = c.name;
    cell(tr, c.name);
    cell(tr, "known to the mesh");
    cell(tr, badgeEl(c.isReady ? "Ready" : "Degraded"));
    cell(tr, String(c.readyTargetCount));
    cell(tr, "");
    rows.push(tr);
  }
  fillRows($("channels"), rows, 5, "no channels");
}

// sample adds the snapshot to the charts' history: the calls per second are measured over at
// least a second of turns.
function sample(s) {
  const t = Date.parse(s.observedAt) || Date.now();
  const turns = s.activity.turns;
  if (lastTurns === null || turns < lastTurns.turns) {
    lastTurns = { t, turns };
  } else if (t - lastTurns.t >= 900) {
    callsPerSecond = ((turns - lastTurns.turns) * 1000) / (t - lastTurns.t);
    lastTurns = { t, turns };
  }
  const queued = s.capacity.coreHwm.totalInstanceAccountedBytes + s.capacity.coreHwm.totalMessagingAccountedBytes;
  const point = { t, calls: callsPerSecond, spots: s.meshStatus.placement.activeSpotCount, bytes: queued };
  const second = Math.floor(t / 1000);
  if (history.length > 0 && Math.floor(history[history.length - 1].t / 1000) === second) {
    history[history.length - 1] = point; // one point a second: its newest figures
  } else {
    history.push(point);
  }
  while (history.length > 0 && t - history[0].t > WINDOW_MS) history.shift();
  text("now-calls", num(Math.round(callsPerSecond)));
  text("now-spots", num(point.spots));
  text("now-bytes", bytes(point.bytes));
  drawChart("chart-calls", "calls", t);
  drawChart("chart-spots", "spots", t);
  drawChart("chart-bytes", "bytes", t);
}

function drawChart(id, key, now) {
  const svg = $(id);
  const W = 300, H = 80, pad = 4;
  let max = 1;
  for (const p of history) max = Math.max(max, p[key]);
  // The time axis spans the history kept, from 30 s up to the whole window.
  const span = history.length > 0 ? Math.min(WINDOW_MS, Math.max(30000, now - history[0].t)) : WINDOW_MS;
  const pts = history.map((p) => {
    const x = W - ((now - p.t) / span) * W;
    const y = H - pad - (p[key] / max) * (H - 2 * pad);
    return x.toFixed(1) + "," + y.toFixed(1);
  });
  svg.replaceChildren();
  if (pts.length === 0) return;
  const ns = "http://www.w3.org/2000/svg";
  const area = document.createElementNS(ns, "polygon");
  const first = pts[0].split(",")[0], last = pts[pts.length - 1].split(",")[0];
  area.setAttribute("points", first + "," + H + " " + pts.join(" ") + " " + last + "," + H);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", pts.join(" "));
  svg.appendChild(area);
  svg.appendChild(line);
  svg.dataset.points = String(pts.length);
}

// The mesh view: every node's own status, fetched by this node.
async function refreshMesh() {
  try {
    const resp = await fetch("/mesh", { cache: "no-store" });
    if (!resp.ok) throw new Error(resp.status + " " + resp.statusText);
    renderMesh(await resp.json());
  } catch (e) {
    text("mesh-when", "the mesh view failed: " + e.message);
  } finally {
    setTimeout(refreshMesh, MESH_EVERY_MS);
  }
}

function renderMesh(v) {
  text("mesh-when", "as of " + new Date(v.observedAt).toLocaleTimeString());
  const rows = v.nodes.map((n) => {
    const tr = document.createElement("tr");
    tr.dataset.node = n.node;
    const st = n.status;
    tr.dataset.state = st ? st.runtime.state : "unreachable";
    cell(tr, n.node + (n.self ? " (this node)" : ""));
    cell(tr, String(n.applicationVersion));
    cell(tr, badgeEl(st ? st.runtime.state : n.registeredState));
    if (!st) {
      const td = cell(tr, n.error || "no status", "err");
      td.colSpan = 5;
    } else {
      cell(tr, badgeEl(st.meshStatus.state));
      cell(tr, st.meshStatus.readyPeerCount + "/" + st.meshStatus.peers.length);
      cell(tr, num(st.meshStatus.placement.activeSpotCount));
      cell(tr, num(st.meshStatus.placement.activeActorCount));
      cell(tr, num(st.activity.turns));
    }
    if (n.adminUrl && !n.self) {
      const a = document.createElement("a");
      a.href = n.adminUrl + "/";
      a.textContent = "open";
      cell(tr, a);
    } else {
      cell(tr, "");
    }
    return tr;
  });
  fillRows($("mesh-nodes"), rows, 9, "no nodes");
}

// The event stream. EventSource reconnects by itself after a broken stream; when the server
// refused the stream (it is closed for good), it is opened again after a pause. The server
// ends each stream after a while and the browser connects again within a moment: the page
// says "reconnecting…" only when the stream is not back within brokenAfter.
const brokenAfter = 1500;

function connect() {
  const conn = $("conn");
  const es = new EventSource("/events");
  let broken = 0;
  const showBroken = () => {
    broken = 0;
    conn.dataset.live = "false";
    conn.textContent = "reconnecting…";
  };
  es.addEventListener("open", () => {
    clearTimeout(broken);
    broken = 0;
    conn.dataset.live = "true";
    conn.textContent = "live";
  });
  es.addEventListener("status", (e) => render(JSON.parse(e.data)));
  es.addEventListener("error", () => {
    if (es.readyState === EventSource.CLOSED) {
      clearTimeout(broken);
      showBroken();
      setTimeout(connect, 2000);
    } else if (!broken) {
      broken = setTimeout(showBroken, brokenAfter);
    }
  });
}

connect();
refreshMesh();
