// loadmaster dashboard: one tile per GPU on a canvas, and the user, queue, operator and job views.
// No build step. Test hooks: window.loadmaster (tileCount, canvasHash, ...) and data-* attributes.
"use strict";

const STATE_COLOURS = ["#2d333b", "#2f81f7", "#d29922", "#f85149"];
const BADGE_COLOURS = { 1: "#ff4d4f", 2: "#d63af9", 4: "#ff9d00" };
const HEADER = 18;

const ui = {
  token: null, me: null, snap: null, layout: null, collapsed: new Set(),
  colour: "state", layoutKind: "hierarchy", at: null, view: "cluster", job: null,
  renders: 0, lastRenderMs: 0, firstRenderMs: null, tiles: 0,
};

// ---- API --------------------------------------------------------------------------------------
async function api(path, options = {}) {
  const headers = { Authorization: `Bearer ${ui.token}`, ...(options.headers || {}) };
  const response = await fetch(path, { ...options, headers });
  if (!response.ok) {
    const detail = await response.json().catch(() => ({}));
    const error = new Error(detail.detail || response.statusText);
    error.status = response.status;
    throw error;
  }
  return response.json();
}

function fmtTime(s) {
  if (s === null || s === undefined) return "-";
  const days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  return `${days[d % 7]} day ${d + 1} ${String(h).padStart(2, "0")}:${String(m).padStart(2, "0")}`;
}
function fmtDur(s) {
  if (s === null || s === undefined) return "-";
  if (s < 3600) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
function esc(text) {
  return String(text ?? "").replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

// ---- settings saved per user -------------------------------------------------------------------
function settingsKey() { return `loadmaster.layout.${ui.me ? ui.me.name : "anon"}`; }
async function loadSettings() {
  // The server keeps each user's layout (it follows the user to any browser); the browser's copy
  // is the fallback when the server has none yet.
  let saved = {};
  try { saved = await api("/api/me/layout"); } catch (error) { saved = {}; }
  if (!saved || !saved.layout) saved = JSON.parse(localStorage.getItem(settingsKey()) || "{}");
  ui.colour = saved.colour || "state";
  ui.layoutKind = saved.layout || (ui.me && ui.me.role === "user" ? "user" : "hierarchy");
  ui.collapsed = new Set(saved.collapsed || []);
  document.getElementById("colour").value = ui.colour;
  document.getElementById("layout").value = ui.layoutKind;
}
function saveSettings() {
  const settings = { colour: ui.colour, layout: ui.layoutKind, collapsed: [...ui.collapsed] };
  localStorage.setItem(settingsKey(), JSON.stringify(settings));
  fetch("/api/me/layout", {
    method: "PUT",
    headers: { "Authorization": `Bearer ${ui.token}`, "Content-Type": "application/json" },
    body: JSON.stringify(settings),
  }).catch(() => {});
}

// ---- layout: groups of node boxes of GPU tiles -------------------------------------------------
// A layout is a list of items: {kind: "header", key, label, depth, x, y, w, h} and
// {kind: "node", node, gpus: [flat indices], x, y, w, h}. Tiles are placed inside node boxes.
// The layout fits the window: when the full layout (10 px tiles, a header per rack or job) is taller
// than the space left in the window, the tiles shrink and the deep groups (racks, zones, jobs) lose
// their header rows and flow inline, a wider gap between them; hovering names every GPU's node and
// owner. So 10,000 GPUs fit one 1920x1080 screen, as NSML Insight draws its whole cluster.
const SCALES = [10, 8, 6, 5, 4, 3, 2].flatMap((tile) => [9, 1, 0].map((headers) => ({
  tile, gap: tile >= 10 ? 2 : tile > 2 ? 1 : 0, pad: tile >= 10 ? 4 : tile >= 6 ? 3 : 2,
  headers, // the deepest group depth that keeps its header row; deeper groups flow inline
}))); // tried in order, largest tiles first; the first that fits the window is drawn
function nodeBox(snap, node, gpus, scale = SCALES[0]) {
  const cols = Math.min(gpus.length, 4) || 1;
  const rows = Math.ceil(gpus.length / cols) || 1;
  const step = scale.tile + scale.gap;
  return { kind: "node", node, gpus, cols, w: cols * step + scale.gap + 2, h: rows * step + scale.gap + 2 };
}

function layoutAt(groups, width, scale) {
  const items = [];
  let y = 0, x = 0, rowH = 0, flowing = false;
  const newline = (x0) => { if (flowing) { y += rowH + scale.pad + 2; } x = x0; rowH = 0; flowing = false; };
  for (const group of groups) {
    const collapsed = ui.collapsed.has(group.key) || group.ancestors.some((k) => ui.collapsed.has(k));
    if (group.ancestors.some((k) => ui.collapsed.has(k))) continue;
    const headed = group.depth <= scale.headers;
    const x0 = Math.min(group.depth, scale.headers) * 14;
    if (headed) {
      newline(x0);
      items.push({ kind: "header", key: group.key, label: group.label, collapsed, depth: group.depth,
                   x: x0, y, w: width - x0, h: HEADER });
      y += HEADER;
      if (collapsed) continue;
    } else if (flowing && group.boxes.length) {
      x += 3 * scale.pad; // an inline group: a wider gap marks where it begins
    }
    if (!group.boxes.length) continue;
    if (!flowing) x = x0;
    for (const spec of group.boxes) {
      const box = nodeBox(null, spec.node, spec.gpus, scale);
      if (x + box.w > width && x > x0) { x = x0; y += rowH + scale.pad; rowH = 0; }
      items.push({ ...box, x, y, group: group.key });
      x += box.w + scale.pad; rowH = Math.max(rowH, box.h);
      flowing = true;
    }
  }
  if (flowing) y += rowH + scale.pad + 2;
  return { items, height: y + 4, scale };
}

function buildLayout(snap, width, maxHeight = Infinity) {
  const groups = ui.layoutKind === "user" ? userGroups(snap) : hierarchyGroups(snap);
  let layout = null;
  for (const scale of SCALES) {
    layout = layoutAt(groups, width, scale);
    if (layout.height <= maxHeight) break;
  }
  return layout;
}

function nodeGpus(snap) {
  const first = []; let at = 0;
  for (const n of snap.nodes.gpus) { first.push(at); at += n; }
  return (i) => Array.from({ length: snap.nodes.gpus[i] }, (_, g) => first[i] + g);
}

function hierarchyGroups(snap) {
  const gpusOf = nodeGpus(snap), groups = [], t = snap.topology, n = snap.nodes;
  const byPool = new Map();
  n.name.forEach((_, i) => {
    const pool = t.pools[n.pool[i]], zone = t.zones[n.zone[i]], rack = t.racks[n.rack[i]];
    if (!byPool.has(pool)) byPool.set(pool, new Map());
    const zones = byPool.get(pool);
    if (!zones.has(zone)) zones.set(zone, new Map());
    const racks = zones.get(zone);
    if (!racks.has(rack)) racks.set(rack, []);
    racks.get(rack).push(i);
  });
  groups.push({ key: "cluster", label: `cluster ${snap.cluster}: ${snap.gpus.count} GPUs`, depth: 0, ancestors: [], boxes: [] });
  for (const [pool, zones] of byPool) {
    const pk = `pool:${pool}`;
    groups.push({ key: pk, label: `pool ${pool}`, depth: 1, ancestors: ["cluster"], boxes: [] });
    for (const [zone, racks] of zones) {
      const zk = `${pk}/zone:${zone}`;
      groups.push({ key: zk, label: `zone ${zone}`, depth: 2, ancestors: ["cluster", pk], boxes: [] });
      for (const [rack, nodes] of racks) {
        const rk = `${zk}/rack:${rack}`;
        groups.push({ key: rk, label: `rack ${rack} (${nodes.length} nodes)`, depth: 3, ancestors: ["cluster", pk, zk],
                      boxes: nodes.map((i) => nodeBox(snap, i, gpusOf(i))) });
      }
    }
  }
  return groups;
}

function userGroups(snap) {
  const gpusOf = nodeGpus(snap), owners = snap.owners, owner = snap.gpus.owner, groups = [];
  const mineSlots = owners.job.map((_, s) => s).filter((s) => owners.mine[s]);
  const nodeOf = [];
  snap.nodes.gpus.forEach((count, i) => { for (let g = 0; g < count; g++) nodeOf.push(i); });
  const taken = new Set();
  groups.push({ key: "mine", label: `my jobs (${mineSlots.length})`, depth: 0, ancestors: [], boxes: [] });
  const bySlot = new Map(mineSlots.map((s) => [s, new Map()])); // slot -> node -> flat GPUs, in one pass
  owner.forEach((o, flat) => {
    const byNode = bySlot.get(o); if (!byNode) return;
    taken.add(flat);
    if (!byNode.has(nodeOf[flat])) byNode.set(nodeOf[flat], []);
    byNode.get(nodeOf[flat]).push(flat);
  });
  for (const slot of mineSlots) {
    const byNode = bySlot.get(slot);
    groups.push({ key: `job:${owners.job[slot]}`, label: `job ${owners.job[slot]} (${owners.gpus[slot]} GPUs)`, depth: 1,
                  ancestors: ["mine"], boxes: [...byNode].map(([node, gpus]) => nodeBox(snap, node, gpus)) });
  }
  const rest = [];
  snap.nodes.name.forEach((_, i) => {
    const gpus = gpusOf(i).filter((f) => !taken.has(f));
    if (gpus.length) rest.push(nodeBox(snap, i, gpus));
  });
  groups.push({ key: "rest", label: "the rest of the cluster", depth: 0, ancestors: [], boxes: rest });
  return groups;
}

// ---- colours -----------------------------------------------------------------------------------
function ramp(v) { // 0..1 -> dark blue .. green .. yellow (viridis-like)
  const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  const x = Math.max(0, Math.min(1, v)) * (stops.length - 1), i = Math.min(Math.floor(x), stops.length - 2), f = x - i;
  const c = stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}
function ownerColour(slot, snap) {
  if (slot < 0) return STATE_COLOURS[0];
  if (snap.owners.job[slot] === "others") return "#484f58";
  let h = 0; for (const ch of snap.owners.job[slot]) h = (h * 31 + ch.charCodeAt(0)) % 360;
  return `hsl(${h},65%,${snap.owners.mine[slot] ? 60 : 45}%)`;
}
function tileColour(snap, flat) {
  const state = snap.gpus.state.charCodeAt(flat) - 48;
  if (ui.colour === "state") return STATE_COLOURS[state];
  if (ui.colour === "owner") return ownerColour(snap.gpus.owner[flat], snap);
  const v = snap.gpus.value[flat];
  if (v < 0 || state === 0) return STATE_COLOURS[0];
  return ramp((v - snap.metric.low) / (snap.metric.high - snap.metric.low));
}

function legend(snap) {
  const el = document.getElementById("legend");
  if (ui.colour === "state") {
    el.innerHTML = snap.states.map((s, i) => `<span><i style="background:${STATE_COLOURS[i]}"></i>${s}</span>`).join("");
  } else if (ui.colour === "owner") {
    el.innerHTML = `<span>colour per job; grey: other users (aggregate)</span>`;
  } else {
    el.innerHTML = `<span><i style="background:${ramp(0)}"></i>${snap.metric.low} ${snap.metric.unit}</span>` +
      `<span><i style="background:${ramp(1)}"></i>${snap.metric.high} ${snap.metric.unit}</span>`;
  }
  el.innerHTML += Object.entries(snap.badges).map(([b, bit]) => `<span><i style="background:${BADGE_COLOURS[bit]}"></i>${b}</span>`).join("");
}

// ---- drawing -----------------------------------------------------------------------------------
function render() {
  const snap = ui.snap; if (!snap) return;
  const t0 = performance.now();
  const canvas = document.getElementById("tiles");
  const width = Math.max(300, canvas.parentElement.clientWidth - (document.getElementById("node-panel").hidden ? 0 : 370));
  // the height left in the window below the canvas's top (at least 300 px): the layout fits it if it can
  const top = canvas.getBoundingClientRect().top + window.scrollY;
  ui.layout = buildLayout(snap, width, Math.max(300, window.innerHeight - top - 8));
  const { tile: TS, gap: GS } = ui.layout.scale;
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio; canvas.height = ui.layout.height * ratio;
  canvas.style.width = `${width}px`; canvas.style.height = `${ui.layout.height}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.fillStyle = "#0d1117"; ctx.fillRect(0, 0, width, ui.layout.height);
  ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle";
  let tiles = 0;
  ui.tileAt = [];
  for (const item of ui.layout.items) {
    if (item.kind === "header") {
      ctx.fillStyle = "#8b949e";
      ctx.fillText(`${item.collapsed ? "▸" : "▾"} ${item.label}`, item.x, item.y + HEADER / 2);
      continue;
    }
    ctx.strokeStyle = "#30363d"; ctx.strokeRect(item.x + 0.5, item.y + 0.5, item.w - 1, item.h - 1);
    const cols = item.cols, mark = Math.max(2, Math.round(TS * 0.4));
    item.gpus.forEach((flat, k) => {
      const x = item.x + 1 + GS + (k % cols) * (TS + GS), y = item.y + 1 + GS + Math.floor(k / cols) * (TS + GS);
      ctx.fillStyle = tileColour(snap, flat); ctx.fillRect(x, y, TS, TS);
      const badges = parseInt(snap.gpus.badges[flat], 16);
      if (badges) {
        const bit = badges & 1 ? 1 : badges & 2 ? 2 : 4;
        ctx.fillStyle = BADGE_COLOURS[bit]; ctx.fillRect(x + TS - mark, y, mark, mark);
      }
      ui.tileAt.push([x, y, flat, item.node]);
      tiles += 1;
    });
  }
  ui.tiles = tiles; ui.renders += 1;
  ui.lastRenderMs = performance.now() - t0;
  if (ui.firstRenderMs === null) ui.firstRenderMs = performance.now();
  canvas.dataset.tiles = String(tiles); canvas.dataset.gpus = String(snap.gpus.count);
  canvas.dataset.renders = String(ui.renders); canvas.dataset.colour = ui.colour; canvas.dataset.layout = ui.layoutKind;
  canvas.dataset.tile = String(TS);
  legend(snap);
}

function hit(event) {
  const canvas = document.getElementById("tiles"), rect = canvas.getBoundingClientRect();
  const x = event.clientX - rect.left, y = event.clientY - rect.top;
  for (const item of ui.layout.items) {
    if (x >= item.x && x < item.x + item.w && y >= item.y && y < item.y + item.h) {
      if (item.kind === "header") return { header: item };
      const t = ui.layout.scale.tile + Math.max(1, ui.layout.scale.gap); // a gap counts towards its tile
      const tile = ui.tileAt.find(([tx, ty, , node]) => node === item.node && x >= tx && x < tx + t && y >= ty && y < ty + t);
      return { node: item.node, flat: tile ? tile[2] : null };
    }
  }
  return null;
}

function describeGpu(flat) {
  const snap = ui.snap, slot = snap.gpus.owner[flat];
  let node = 0, first = 0;
  while (first + snap.nodes.gpus[node] <= flat) { first += snap.nodes.gpus[node]; node += 1; }
  const state = snap.states[snap.gpus.state.charCodeAt(flat) - 48];
  const owner = slot >= 0 ? `${snap.owners.job[slot]} (${snap.owners.user[slot]})` : "-";
  const v = snap.gpus.value[flat];
  return `${snap.nodes.name[node]} GPU ${flat - first}\n${state}\nowner ${owner}\n${snap.metric.label} ${v < 0 ? "-" : v + " " + snap.metric.unit}`;
}

async function openNode(node) {
  const name = ui.snap.nodes.name[node];
  const panel = document.getElementById("node-panel");
  const data = await api(`/api/nodes/${encodeURIComponent(name)}`);
  panel.hidden = false;
  panel.dataset.node = name;
  panel.innerHTML = `<b>${esc(name)}</b> <a id="close-node">close</a><div class="muted">${esc(data.pool)} / ${esc(data.zone)} / ${esc(data.rack)} · ${esc(data.resource_type)}</div>
    <table><tr><th>GPU</th><th>state</th><th>job</th><th class="num">util</th><th class="num">mem%</th><th class="num">W</th><th class="num">°C</th><th>problem</th></tr>
    ${data.gpus.map((g) => `<tr data-testid="node-gpu" data-gpu="${g.gpu}"><td>${g.gpu}</td><td class="state-${g.state}">${g.state}</td>
      <td>${g.job && g.job !== "others" ? `<a data-job="${esc(g.job)}">${esc(g.job)}</a>` : esc(g.job || "")}</td>
      <td class="num">${g.util ?? "-"}</td><td class="num">${g.memory ?? "-"}</td><td class="num">${g.power ?? "-"}</td><td class="num">${g.temp ?? "-"}</td>
      <td class="reason" data-testid="gpu-problem">${g.problem ? esc(g.problem) : esc(g.badges.join(" "))}</td></tr>`).join("")}</table>`;
  document.getElementById("close-node").onclick = () => { panel.hidden = true; render(); };
  render();
}

// ---- data refresh -------------------------------------------------------------------------------
async function refreshCluster() {
  const metric = ["state", "owner"].includes(ui.colour) ? "util" : ui.colour;
  const at = ui.at === null ? "" : `&at=${ui.at}`;
  ui.snap = await api(`/api/cluster?metric=${metric}${at}`);
  const scrub = document.getElementById("scrubber");
  scrub.min = Math.floor(ui.snap.oldest_s); scrub.max = Math.ceil(ui.snap.now_s);
  if (ui.at === null) scrub.value = scrub.max;
  document.getElementById("scrub-label").textContent = ui.at === null ? "live" : fmtTime(ui.snap.time_s);
  document.getElementById("clock").textContent = `${fmtTime(ui.snap.now_s)} (simulated)`;
  render();
}

function table(headers, rows) {
  return `<table><tr>${headers.map((h) => `<th>${h}</th>`).join("")}</tr>${rows.join("")}</table>`;
}

async function showMe() {
  const me = await api("/api/me");
  const el = document.getElementById("view-me");
  el.innerHTML = `<div class="cards"><div class="card">GPUs in use<b>${me.gpus_in_use}</b></div>
    <div class="card">my GPU efficiency<b>${me.efficiency_pct ?? "-"}${me.efficiency_pct === null ? "" : " %"}</b></div>
    <div class="card">running<b>${me.running.length}</b></div><div class="card">pending<b>${me.pending.length}</b></div></div>
    <h3>Running</h3>${dataTable("me-running", { testid: "my-job", sort: "start_s", desc: true, columns: [
      { key: "id", label: "job", html: (j) => `<a data-job="${esc(j.id)}">${esc(j.id)}</a>` },
      { key: "gpus", label: "GPUs", num: true }, { key: "pool", label: "pool" },
      { key: "start_s", label: "started", html: (j) => fmtTime(j.start_s) },
      { key: "efficiency_pct", label: "efficiency", num: true, html: (j) => `${j.efficiency_pct ?? "-"} %` }], rows: me.running })}
    <h3>Pending</h3>${dataTable("me-pending", { columns: pendingColumns(false), rows: me.pending, empty: "nothing waiting" })}
    <div id="my-reclaim" data-testid="my-reclaim"></div>`;
  showNotices().catch((error) => { document.getElementById("my-reclaim").textContent = error.message; }); // reclaim.js
}

function pendingColumns(withUser) { // a pending job's row, in My jobs and in the queue
  return [
    { key: "position", label: "pos", num: true },
    { key: "id", label: "job", html: (p) => `<a data-job="${esc(p.id)}">${esc(p.id)}</a>` },
    ...(withUser ? [{ key: "user", label: "user" }] : [{ key: "queue", label: "queue" }]),
    { key: "gpus", label: "GPUs", num: true },
    { key: "wait_s", label: "waiting", num: true, html: (p) => fmtDur(p.wait_s) },
    { key: "code", label: "code" },
    { key: "reason", label: "why it waits", cls: "reason", value: (p) => `${p.plugin ? `[${p.plugin}] ` : ""}${p.reason}` },
    { key: "estimated_start_s", label: "estimated start", html: (p) => fmtTime(p.estimated_start_s) },
  ];
}

async function showQueue() {
  const q = await api("/api/queue");
  document.getElementById("view-queue").innerHTML = q.queues.map((queue) => `<h3>queue ${esc(queue.queue)}:
    ${queue.pending} pending, ${queue.gpus_wanted} GPUs wanted, oldest waits ${fmtDur(queue.oldest_wait_s)}${queue.hidden ? `, ${queue.hidden} of other users` : ""}</h3>
    ${dataTable(`queue-${queue.queue}`, { testid: "queue-job", sort: "position", columns: pendingColumns(true), rows: queue.jobs })}`).join("") || "<p>Nothing is waiting.</p>";
}

async function showOperator() {
  const s = await api("/api/operator/summary");
  const el = document.getElementById("view-operator");
  el.innerHTML = `<div class="cards">${Object.entries(s.by_state).map(([k, v]) => `<div class="card state-${k}">${k}<b>${v}</b></div>`).join("")}
      <div class="card" id="idle-card" data-testid="idle-card" data-idle="${s.idle_allocated.gpus}" title="allocated GPUs under 5 % utilisation in the newest sample">idle GPUs<b>${s.idle_allocated.gpus}</b>
        <span class="muted" id="idle-explain">allocated, under 5 % in the newest sample</span></div></div>
    <div class="controls">speed <input id="speed" type="number" min="0" value="${s.speed}" style="width:70px"> x
      <button id="speed-set">set</button> <span class="muted">${s.paused ? "paused" : ""}</span></div>
    <h3>Pools</h3>${table(["pool", "GPUs", "allocated", "free", "fragmented free", "largest free block", "queue", "GPUs wanted", "oldest wait"],
      s.pools.map((p) => `<tr><td>${esc(p.pool)}</td><td class="num">${p.gpus}</td><td class="num">${p.allocated}</td><td class="num">${p.free}</td><td class="num">${p.fragmented_free}</td><td class="num">${p.largest_free_block}</td><td class="num">${p.queue_length}</td><td class="num">${p.gpus_wanted}</td><td>${fmtDur(p.oldest_wait_s)}</td></tr>`))}
    <div id="history" data-testid="history"><h3>Pools over time</h3><p class="muted">loading…</p></div>
    <h3>Unhealthy GPUs</h3><p class="muted">XID meanings from NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)</p>
    ${dataTable("unhealthy", { testid: "unhealthy", columns: [
      { key: "node", label: "node" }, { key: "gpu", label: "GPU", num: true },
      { key: "xid", label: "XID", num: true, html: (u) => u.xid || "" },
      { key: "meaning", label: "what it means", cls: "reason" }], rows: s.unhealthy, empty: "every GPU is healthy" })}
    <div id="reclaim" data-testid="reclaim"><h3>Reclaim</h3><p class="muted">loading the reclaim report…</p></div>
    <div id="ledger" data-testid="ledger"></div>
    <div id="groups" data-testid="groups"><h3>Groups</h3><p class="muted">loading…</p></div>
    <h3>Usage by user</h3>${dataTable("users", { sort: "gpus", desc: true, columns: [
      { key: "user", label: "user" }, { key: "gpus", label: "GPUs", num: true }], rows: s.users })}`;
  showLedger().catch((error) => { document.getElementById("ledger").textContent = error.message; }); // reclaim.js
  showHistory(document.getElementById("history"));
  showGroups(document.getElementById("groups"));
  showReclaim().catch((error) => {
    document.getElementById("reclaim").innerHTML = `<h3>Reclaim</h3><p class="error">${esc(error.message)}</p>`;
  });
  document.getElementById("speed-set").onclick = async () => {
    await api("/api/operator/speed", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ speed: Number(document.getElementById("speed").value) }) });
    showOperator();
  };
}

async function showReclaim() { // idle / under-used allocated GPUs per job and user, with the action to take
  const r = await api("/api/operator/reclaim");
  const rule = `idle: GPU utilisation ≤ ${r.rule.idle_max_util_pct} % in every ${r.rule.sample_s} s sample for ${fmtDur(r.rule.idle_window_s)}; ` +
    `under-used: p95 SM activity < ${r.rule.underused_p95_sm} over ${fmtDur(r.rule.underused_window_s)}`;
  const users = Object.entries(r.users).map(([u, c]) => `${esc(u)}: ${c.idle_gpus} idle, ${c.underused_gpus} under-used`).join("; ");
  document.getElementById("reclaim").innerHTML = `<h3>Reclaim: ${r.idle_gpus} GPUs idle for ${fmtDur(r.rule.idle_window_s)} or more, ${r.underused_gpus} under-used; ${r.wasted_gpu_hours.toFixed(1)} GPU-hours wasted</h3>
    <p class="muted">${rule}; ranked by wasted GPU-hours (click a header to sort, type to filter)</p><p class="muted">by user: ${users || "none"}</p>
    ${dataTable("reclaim", { testid: "reclaim-row", sort: "wasted_gpu_hours", desc: true, columns: [
      { key: "job", label: "job", html: (j) => `<a data-job="${esc(j.job)}">${esc(j.job)}</a>` },
      { key: "user", label: "user" }, { key: "gpus", label: "GPUs", num: true },
      { key: "idle_n", label: "idle", num: true, value: (j) => j.idle.length, html: (j) => `<span title="${esc(j.idle.join(" "))}">${j.idle.length}</span>` },
      { key: "idle_for_s", label: "idle for", num: true, value: (j) => (j.idle.length ? j.idle_for_s : null), html: (j) => (j.idle.length ? fmtDur(j.idle_for_s) : "") },
      { key: "wasted_gpu_hours", label: "wasted GPU-h", num: true, html: (j) => j.wasted_gpu_hours.toFixed(1) },
      { key: "under_n", label: "under-used", num: true, value: (j) => j.underused.length, html: (j) => `<span title="${esc(j.underused.join(" "))}">${j.underused.length}</span>` },
      { key: "action", label: "action", cls: "reason" },
    ], rows: r.jobs })}`;
  explainIdle(r);
}

function explainIdle(r) { // the operator page's one count of idle GPUs, reconciled with the reclaim table
  const now = r.idle_now, card = document.getElementById("idle-card");
  if (!now || !card) return;
  card.dataset.idle = String(now.gpus); card.dataset.listed = String(now.listed); card.dataset.notListed = String(now.not_listed);
  card.querySelector("b").textContent = String(now.gpus);
  document.getElementById("idle-explain").textContent = `${now.listed} idle ${fmtDur(r.rule.idle_window_s)} or more (in Reclaim), ` +
    `${now.not_listed} idle for less` + (now.listed_not_idle_now ? `; ${now.listed_not_idle_now} in Reclaim busy again now` : "");
}

async function showFindings(jobId) { // the diagnostics findings of the job's telemetry
  const el = document.getElementById("job-findings");
  el.innerHTML = `<h3>Findings</h3><p class="muted">diagnosing…</p>`;
  let f;
  try {
    f = await api(`/api/jobs/${encodeURIComponent(jobId)}/findings`);
  } catch (error) {
    el.innerHTML = `<h3>Findings</h3><p class="error">${esc(error.message)}</p>`; return;
  }
  const span = f.start_s === null ? "" : ` (${fmtTime(f.start_s)} to ${fmtTime(f.end_s)}, ${f.step_s} s steps)`;
  const rows = f.findings.map((x) => {
    const targets = x.nodes.length ? x.nodes.join(", ") : x.gpus.join(", ");
    const numbers = Object.entries(x.evidence.numbers).map(([k, v]) => `${esc(k)} ${v ?? "-"}`).join(", ");
    return `<tr data-testid="finding" data-kind="${esc(x.kind)}"><td>${esc(x.kind)}</td><td>${esc(targets)}</td>
      <td>${fmtTime(x.start_s)} – ${fmtTime(x.end_s)}</td><td class="reason">${esc(x.evidence.text)}<div class="muted">${esc(x.evidence.metrics.join(", "))}: ${numbers}</div></td>
      <td class="num">${x.confidence.toFixed(2)}</td></tr>`;
  });
  el.dataset.count = String(f.findings.length);
  el.innerHTML = `<h3>Findings${span}</h3>${f.note ? `<p class="muted">${esc(f.note)}</p>` : ""}
    ${rows.length ? table(["kind", "targets", "interval", "evidence", "confidence"], rows) : (f.note ? "" : "<p>No findings: the job's GPUs look like their peers.</p>")}`;
}

async function showJob(jobId) {
  ui.job = jobId;
  const tab = document.getElementById("job-tab");
  tab.hidden = false; tab.textContent = `Job ${jobId}`;
  const info = document.getElementById("job-info");
  let job;
  try {
    job = await api(`/api/jobs/${encodeURIComponent(jobId)}`);
  } catch (error) {
    info.innerHTML = `<p class="error" data-status="${error.status}">${error.status}: ${esc(error.message)}</p>`;
    document.getElementById("job-heatmap").innerHTML = ""; document.getElementById("job-sparklines").innerHTML = "";
    document.getElementById("job-findings").innerHTML = "";
    return;
  }
  info.innerHTML = `<h3 data-testid="job-title">${esc(job.id)} · ${esc(job.user)} · ${job.gpus} GPUs · ${esc(job.state)}</h3>
    <p class="muted">submitted ${fmtTime(job.submit_s)}, started ${fmtTime(job.start_s)}, ended ${fmtTime(job.end_s)};
    efficiency ${job.efficiency_pct ?? "-"} %; on ${job.placements.map((p) => `${esc(p.node)}[${p.gpus.join(",")}]`).join(" ")}</p>
    ${job.pending ? `<p>Waiting: ${job.pending.plugin ? `[${esc(job.pending.plugin)}] ` : ""}${esc(job.pending.reason)}; position ${job.pending.position}; estimated start ${fmtTime(job.pending.estimated_start_s)}</p>` : ""}
    ${job.last_wait_reason ? `<p class="muted">last wait reason: ${esc(job.last_wait_reason)}</p>` : ""}`;
  const findings = showFindings(jobId);
  const metric = document.getElementById("job-metric").value;
  const t = await api(`/api/jobs/${encodeURIComponent(jobId)}/telemetry?metric=${metric}`);
  const x = t.times_s.map((s) => timeDate(s)); // a date axis: ticks read "Tue 13:05", not a day count
  if (t.ranks.length) await loadPlotly();
  if (window.Plotly && t.ranks.length) {
    Plotly.react("job-heatmap", [{ type: "heatmap", z: t.values, x, y: t.ranks, zmin: t.low, zmax: t.high, colorscale: "Viridis" }],
      { title: `${metric} (${t.unit}) per rank over time`, height: Math.min(600, 140 + 18 * t.ranks.length),
        xaxis: { type: "date", tickformat: "%a %H:%M", hoverformat: "%a %H:%M:%S" },
        paper_bgcolor: "#0d1117", plot_bgcolor: "#0d1117", font: { color: "#e6edf3" }, margin: { l: 110, r: 20, t: 40, b: 60 } },
      { displayModeBar: false });
  }
  const span = t.times_s.length ? `${fmtTick(t.times_s[0], 86400)} to ${fmtTick(t.times_s[t.times_s.length - 1], 86400)}` : "";
  document.getElementById("job-sparklines").innerHTML = (t.ranks.length ? `<p class="muted">per rank, ${esc(metric)} from ${t.low} to ${t.high} ${esc(t.unit)}, ${span}</p>` : "") +
    t.ranks.map((rank, i) => `<span class="spark" data-testid="sparkline"><span>${esc(rank)}</span>${sparkline(t.values[i], t.low, t.high, t.unit)}</span>`).join("");
  await findings;
}

let plotlyLoading = null;
function loadPlotly() { // plotly.js is 4.8 MB: fetched only when a chart is first needed, not before the tiles
  if (window.Plotly) return Promise.resolve();
  plotlyLoading = plotlyLoading || new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = "/vendor/plotly.min.js"; script.onload = resolve; script.onerror = reject;
    document.head.appendChild(script);
  });
  return plotlyLoading;
}

function sparkline(values, low, high, unit = "") { // a line with its scale: low and high at the left, the last value at the right
  const w = 160, h = 26, l = 34, r = 40, n = values.length;
  if (!n) return "<svg></svg>";
  const pts = values.map((v, i) => v === null ? null : `${l + (i / Math.max(1, n - 1)) * w},${h - ((v - low) / (high - low)) * (h - 2) - 1}`).filter(Boolean);
  const last = [...values].reverse().find((v) => v !== null);
  return `<svg width="${l + w + r}" height="${h}" class="sparkline"><line x1="${l}" x2="${l}" y1="0" y2="${h}" class="grid"/>
    <text x="${l - 3}" y="8" text-anchor="end" class="tick" data-scale="high">${high}</text><text x="${l - 3}" y="${h - 1}" text-anchor="end" class="tick" data-scale="low">${low}</text>
    <polyline fill="none" stroke="#58a6ff" stroke-width="1.2" points="${pts.join(" ")}"/>
    <text x="${l + w + 4}" y="${h / 2 + 4}" class="tick" data-scale="last">${last === undefined ? "-" : `${last} ${esc(unit)}`}</text></svg>`;
}

// ---- navigation --------------------------------------------------------------------------------
async function show(view) {
  ui.view = view;
  document.querySelectorAll("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.view === view));
  document.querySelectorAll(".view").forEach((v) => { v.hidden = v.id !== `view-${view}`; });
  if (view === "cluster") await refreshCluster();
  if (view === "me") await showMe();
  if (view === "queue") await showQueue();
  if (view === "operator") await showOperator();
  if (view === "job" && ui.job) await showJob(ui.job);
}

async function openJob(jobId) { ui.job = jobId; await show("job"); }

function wire() {
  document.querySelectorAll("#tabs button").forEach((b) => { b.onclick = () => show(b.dataset.view); });
  document.getElementById("colour").onchange = (e) => { ui.colour = e.target.value; saveSettings(); refreshCluster(); };
  document.getElementById("layout").onchange = (e) => { ui.layoutKind = e.target.value; saveSettings(); render(); };
  document.getElementById("job-metric").onchange = () => ui.job && showJob(ui.job);
  document.getElementById("scrubber").oninput = (e) => {
    const v = Number(e.target.value);
    ui.at = v >= Number(e.target.max) ? null : v; refreshCluster();
  };
  document.getElementById("live").onclick = () => { ui.at = null; refreshCluster(); };
  const canvas = document.getElementById("tiles"), tip = document.getElementById("tooltip");
  canvas.onclick = (e) => {
    const found = hit(e); if (!found) return;
    if (found.header) {
      const key = found.header.key;
      ui.collapsed.has(key) ? ui.collapsed.delete(key) : ui.collapsed.add(key);
      saveSettings(); render();
    } else openNode(found.node);
  };
  canvas.onmousemove = (e) => {
    const found = ui.layout && hit(e);
    if (found && found.flat !== null && found.flat !== undefined) {
      tip.hidden = false; tip.textContent = describeGpu(found.flat);
      tip.style.left = `${e.clientX + 12}px`; tip.style.top = `${e.clientY + 12}px`;
    } else tip.hidden = true;
  };
  canvas.onmouseleave = () => { tip.hidden = true; };
  document.body.addEventListener("click", (e) => {
    const link = e.target.closest("a[data-job]");
    if (link) { e.preventDefault(); openJob(link.dataset.job); }
  });
  window.addEventListener("resize", () => render());
  document.getElementById("token-save").onclick = () => {
    localStorage.setItem("loadmaster.token", document.getElementById("token-input").value.trim());
    location.hash = ""; location.reload();
  };
}

function canvasHash() {
  const canvas = document.getElementById("tiles");
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let h = 2166136261;
  for (let i = 0; i < data.length; i += 4) { h ^= data[i] | (data[i + 1] << 8) | (data[i + 2] << 16); h = Math.imul(h, 16777619) >>> 0; }
  return h.toString(16);
}

async function start() {
  wire();
  // #token=... signs in; #job=ID opens that job's page (the link `loadmaster status` prints)
  const hashArgs = new URLSearchParams(location.hash.slice(1));
  const fromHash = hashArgs.get("token"), jobFromHash = hashArgs.get("job");
  if (fromHash) { localStorage.setItem("loadmaster.token", fromHash); history.replaceState(null, "", location.pathname); }
  ui.token = localStorage.getItem("loadmaster.token");
  if (!ui.token) { document.getElementById("login").hidden = false; return; }
  try {
    ui.me = await api("/api/me");
  } catch (error) {
    document.getElementById("login").hidden = false; return;
  }
  document.getElementById("who").textContent = `${ui.me.name} (${ui.me.role})`;
  document.body.dataset.role = ui.me.role;
  document.querySelectorAll("[data-role=operator]").forEach((el) => { el.hidden = ui.me.role !== "operator"; });
  await loadSettings();
  await show(ui.me.role === "user" ? "cluster" : "cluster");
  if (jobFromHash) await openJob(jobFromHash);
  document.body.dataset.ready = "true";
  setInterval(() => { if (ui.view === "cluster" && ui.at === null) refreshCluster().catch(() => {}); }, 2000);
}

window.loadmaster = {
  tileCount: () => ui.tiles,
  gpuCount: () => (ui.snap ? ui.snap.gpus.count : 0),
  canvasHash,
  renders: () => ui.renders,
  lastRenderMs: () => ui.lastRenderMs,
  firstRenderMs: () => ui.firstRenderMs,
  snapshot: () => ui.snap,
  nodeTile: (name) => { // the centre of a node's first tile, in page coordinates, for click tests
    const node = ui.snap.nodes.name.indexOf(name);
    const tile = ui.tileAt.find((t) => t[3] === node); if (!tile) return null;
    const r = document.getElementById("tiles").getBoundingClientRect();
    const half = ui.layout.scale.tile / 2;
    return { x: r.left + tile[0] + half, y: r.top + tile[1] + half };
  },
  setColour: (c) => { ui.colour = c; document.getElementById("colour").value = c; return refreshCluster(); },
  setLayout: (l) => { ui.layoutKind = l; document.getElementById("layout").value = l; render(); },
  openJob,
  pause: () => { ui.at = ui.snap ? ui.snap.time_s : null; },
};

document.addEventListener("DOMContentLoaded", start);
