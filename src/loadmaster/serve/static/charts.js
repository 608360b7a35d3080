// loadmaster dashboard: time axes people can read, line charts with scales, and the operator's
// history charts (allocation, utilisation and queue length per pool, with a time-range picker).
// Plain SVG, no dependency. Test hooks: data-testid="history-chart" (data-series, data-points),
// the tick labels' text, and data-window on the range picker.
"use strict";

// The demo's clock counts seconds from Monday 00:00 of its first simulated week; a live cluster's
// is Unix time. Both become a Date so that axes can say "Tue 13:05" instead of a day count.
const SIM_EPOCH_MS = Date.UTC(2024, 0, 1); // a Monday
const UNIX_FROM_S = 1e8; // times above this are Unix seconds (1973 on), below it the demo's clock

function timeDate(s) {
  return new Date(s >= UNIX_FROM_S ? s * 1000 : SIM_EPOCH_MS + s * 1000);
}
function timeZone(s) { return s >= UNIX_FROM_S ? undefined : "UTC"; } // the demo's clock has no zone

function fmtTick(s, spanS) { // a tick label: the time of day, with the weekday where the span needs it
  const opts = { hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZone: timeZone(s) };
  if (spanS > 20 * 3600) opts.weekday = "short";
  return timeDate(s).toLocaleString("en-GB", opts);
}

function niceStep(span, target) { // a round tick step (1, 2, 5 x 10^k) giving about `target` ticks
  const raw = span / Math.max(1, target), mag = Math.pow(10, Math.floor(Math.log10(raw || 1)));
  return [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
}

const TIME_STEPS = [60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
function timeTicks(lo, hi, target = 6) { // round clock times (every 5 min, 1 h, 6 h, ...) in [lo, hi]
  const step = TIME_STEPS.find((s) => (hi - lo) / s <= target) || 86400 * Math.ceil((hi - lo) / 86400 / target);
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi; t += step) out.push(t);
  return out;
}

const PALETTE = ["#58a6ff", "#3fb950", "#d29922", "#f778ba", "#a371f7", "#ff7b72", "#79c0ff", "#56d364"];

// A line chart as SVG: x is time (seconds), y from 0 to yMax (or the data's max) with its unit.
function lineChart({ title, unit, times, series, yMax, integer = false, width = 440, height = 170, testid }) {
  const m = { l: 46, r: 22, t: 20, b: 24 }, w = width - m.l - m.r, h = height - m.t - m.b;
  const lo = times[0], hi = times[times.length - 1];
  const finite = series.flatMap((s) => s.values.filter((v) => v !== null && Number.isFinite(v)));
  const top = yMax ?? Math.max(1, ...finite) * 1.1;
  const yStep = integer ? Math.max(1, niceStep(top, 4)) : niceStep(top, 4), yTop = Math.ceil(top / yStep) * yStep;
  const X = (t) => m.l + (hi > lo ? ((t - lo) / (hi - lo)) * w : w / 2), Y = (v) => m.t + h - (v / yTop) * h;
  let svg = `<svg class="chart" width="${width}" height="${height}"${testid ? ` data-testid="${testid}"` : ""} data-series="${series.length}" data-points="${times.length}">`;
  svg += `<text x="${m.l}" y="13" class="chart-title">${esc(title)}</text>`;
  for (let v = 0; v <= yTop + 1e-9; v += yStep) {
    svg += `<line x1="${m.l}" x2="${m.l + w}" y1="${Y(v)}" y2="${Y(v)}" class="grid"/>`;
    svg += `<text x="${m.l - 4}" y="${Y(v) + 3}" text-anchor="end" class="tick" data-axis="y">${+v.toFixed(2)}${unit ? ` ${esc(unit)}` : ""}</text>`;
  }
  for (const t of timeTicks(lo, hi, Math.max(2, Math.floor(w / 80)))) {
    svg += `<line x1="${X(t)}" x2="${X(t)}" y1="${m.t}" y2="${m.t + h}" class="grid"/>`;
    svg += `<text x="${X(t)}" y="${m.t + h + 14}" text-anchor="middle" class="tick" data-axis="x">${fmtTick(t, hi - lo)}</text>`;
  }
  series.forEach((s, i) => {
    const colour = s.colour || PALETTE[i % PALETTE.length];
    let d = "", pen = false;
    s.values.forEach((v, k) => {
      if (v === null || !Number.isFinite(v)) { pen = false; return; }
      d += `${pen ? "L" : "M"}${X(times[k]).toFixed(1)},${Y(v).toFixed(1)}`; pen = true;
    });
    svg += `<path d="${d}" fill="none" stroke="${colour}" stroke-width="1.5" data-name="${esc(s.name)}"><title>${esc(s.name)}</title></path>`;
  });
  return svg + "</svg>";
}

function chartLegend(names) {
  return `<div class="chart-legend">${names.map((n, i) => `<span><i style="background:${PALETTE[i % PALETTE.length]}"></i>${esc(n)}</span>`).join("")}</div>`;
}

// ---- the operator's history charts -----------------------------------------------------------------
const RANGES = [[900, "15 min"], [3600, "1 h"], [3 * 3600, "3 h"], [6 * 3600, "6 h"], [24 * 3600, "24 h"], [0, "all kept"]];
const historyView = { windowS: null }; // not "history": that is window.history

async function showHistory(el) {
  if (historyView.windowS === null) { // the user's saved preference, if the server keeps one
    try { historyView.windowS = (await api("/api/me/settings")).time_range_s || 0; } catch (error) { historyView.windowS = 0; }
  }
  const query = historyView.windowS ? `?window_s=${historyView.windowS}` : "";
  let h;
  try {
    h = await api(`/api/operator/history${query}`);
  } catch (error) {
    el.innerHTML = `<h3>Pools over time</h3><p class="error">${esc(error.message)}</p>`; return;
  }
  const names = h.pools.map((p) => p.pool);
  const pct = (p) => p.allocated.map((a) => (p.gpus ? (100 * a) / p.gpus : null));
  const picker = `<label>range <select id="history-range" data-window="${historyView.windowS}">${RANGES.map(([s, label]) =>
    `<option value="${s}"${s === historyView.windowS ? " selected" : ""}>${label}</option>`).join("")}</select></label>`;
  el.innerHTML = `<h3>Pools over time</h3><div class="controls">${picker}
      <span class="muted">${fmtTime(h.times_s[0])} to ${fmtTime(h.time_s)}, a point every ${fmtDur(h.step_s)}; history kept from ${fmtTime(h.oldest_s)}</span></div>
    ${chartLegend(names)}${h.queue_any_pool.some((v) => v > 0) ? '<span class="muted">grey: jobs waiting that name no pool</span>' : ""}<div class="charts">
    ${lineChart({ title: "GPUs allocated (% of the pool)", unit: "%", times: h.times_s, yMax: 100, testid: "history-chart",
                  series: h.pools.map((p) => ({ name: `${p.pool} (${p.gpus} GPUs)`, values: pct(p) })) })}
    ${lineChart({ title: "mean GPU utilisation", unit: "%", times: h.times_s, yMax: 100, testid: "history-chart",
                  series: h.pools.map((p) => ({ name: p.pool, values: p.util_pct })) })}
    ${lineChart({ title: "jobs waiting", unit: "", times: h.times_s, integer: true, testid: "history-chart",
                  series: [...h.pools.map((p) => ({ name: p.pool, values: p.queue })),
                           ...(h.queue_any_pool.some((v) => v > 0) ? [{ name: "any pool", values: h.queue_any_pool, colour: "#8b949e" }] : [])] })}</div>`;
  document.getElementById("history-range").onchange = (e) => { historyView.windowS = Number(e.target.value); showHistory(el); };
}

// ---- groups: usage, quota and borrowing ----------------------------------------------------------
async function showGroups(el) {
  let g;
  try {
    g = await api("/api/operator/groups");
  } catch (error) {
    el.innerHTML = `<h3>Groups</h3><p class="error">${esc(error.message)}</p>`; return;
  }
  const n = (v) => (v === null || v === undefined ? "-" : v);
  const cohorts = g.orgs.map((o) => `${esc(o.org)}: ${o.used} of ${o.nominal} GPUs in use (${esc(o.groups.join(", "))})`).join("; ");
  el.innerHTML = `<h3>Groups: usage, quota and borrowing</h3>
    <p class="muted">${g.quota ? `cohorts: ${cohorts}` : esc(g.note)}; share: the group's part of all GPUs in use</p>
    ${dataTable("groups", { testid: "group-row", sort: "used", desc: true, columns: [
      { key: "group", label: "group" }, { key: "org", label: "cohort", html: (r) => esc(n(r.org)) },
      { key: "used", label: "GPUs used", num: true }, { key: "share_pct", label: "share %", num: true },
      { key: "nominal", label: "nominal", num: true, html: (r) => n(r.nominal), title: "guaranteed GPUs (quota)" },
      { key: "borrowed", label: "borrowed", num: true, html: (r) => n(r.borrowed), title: "GPUs used above nominal" },
      { key: "borrowing_limit", label: "borrow limit", num: true, html: (r) => (r.org ? n(r.borrowing_limit ?? "∞") : "-") },
      { key: "unused_nominal", label: "lendable", num: true, html: (r) => n(r.unused_nominal), title: "nominal GPUs the group leaves unused" },
      { key: "running_jobs", label: "running", num: true }, { key: "pending_jobs", label: "pending", num: true },
      { key: "gpus_wanted", label: "GPUs wanted", num: true }, { key: "users", label: "users", num: true },
    ], rows: g.groups })}`;
}
