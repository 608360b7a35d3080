// loadmaster dashboard: long tables that sort, filter and page (no build step, no dependency).
//
// dataTable(id, spec) returns the HTML of a table whose rows the reader can sort (click a header;
// again to reverse), filter (every word typed must appear in the row's text) and page through.
// spec: { columns: [{ key, label, num, html(row), value(row), title }], rows, sort, desc, pageSize,
//         testid, empty }. Sorting, filter and page are kept per id, so a refreshed table stays as
// the reader left it. Test hooks: data-rows (rows after the filter), data-sort, data-desc, data-page.
"use strict";

const TABLES = new Map();
const PAGE_SIZES = [25, 50, 100, 500];

function dtEsc(text) {
  return String(text ?? "").replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

function dtValue(column, row) {
  return column.value ? column.value(row) : row[column.key];
}

function dtCompare(a, b) { // numbers before text; missing values last whichever the direction
  const missA = a === null || a === undefined || a === "", missB = b === null || b === undefined || b === "";
  if (missA || missB) return missA === missB ? 0 : missA ? 1 : -1;
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

function dtText(spec, row) { // what the filter searches: every column's value as shown
  return spec.columns.map((c) => String(dtValue(c, row) ?? "")).join(" ").toLowerCase();
}

function dtVisible(state) {
  const { spec } = state;
  const words = state.filter.toLowerCase().split(/\s+/).filter(Boolean);
  let rows = words.length ? spec.rows.filter((r) => { const t = dtText(spec, r); return words.every((w) => t.includes(w)); }) : spec.rows.slice();
  const column = spec.columns.find((c) => c.key === state.sort);
  if (column) {
    const sign = state.desc ? -1 : 1;
    rows = rows.map((r, i) => [r, i]).sort(([a, i], [b, j]) => {
      const va = dtValue(column, a), vb = dtValue(column, b);
      const missing = (va === null || va === undefined || va === "") - (vb === null || vb === undefined || vb === "");
      return missing || sign * dtCompare(va, vb) || i - j; // stable: ties keep the server's order
    }).map(([r]) => r);
  }
  return rows;
}

function dtBody(id) {
  const state = TABLES.get(id), { spec } = state;
  const rows = dtVisible(state);
  const pages = Math.max(1, Math.ceil(rows.length / state.pageSize));
  state.page = Math.min(Math.max(0, state.page), pages - 1);
  const first = state.page * state.pageSize, shown = rows.slice(first, first + state.pageSize);
  const head = spec.columns.map((c) => {
    const arrow = c.key === state.sort ? (state.desc ? " ▾" : " ▴") : "";
    return `<th class="${c.num ? "num " : ""}sortable" data-dt-sort="${dtEsc(c.key)}"${c.title ? ` title="${dtEsc(c.title)}"` : ""}>${dtEsc(c.label)}${arrow}</th>`;
  }).join("");
  const body = shown.map((r) => `<tr${spec.testid ? ` data-testid="${spec.testid}"` : ""}>${spec.columns.map((c) =>
    `<td${c.num ? ' class="num"' : c.cls ? ` class="${c.cls}"` : ""}>${c.html ? c.html(r) : dtEsc(dtValue(c, r))}</td>`).join("")}</tr>`).join("");
  const info = rows.length ? `${first + 1}–${first + shown.length} of ${rows.length}` : "no rows";
  const total = rows.length === spec.rows.length ? "" : ` (${spec.rows.length} before the filter)`;
  return {
    table: `<table data-rows="${rows.length}" data-sort="${dtEsc(state.sort || "")}" data-desc="${state.desc}" data-page="${state.page}">
      <tr>${head}</tr>${body}</table>${!rows.length && spec.empty ? `<p class="muted">${dtEsc(spec.empty)}</p>` : ""}`,
    pager: `<button data-dt-page="-1"${state.page === 0 ? " disabled" : ""}>‹ prev</button>
      <span class="dt-info">${info}${total}</span>
      <button data-dt-page="1"${state.page >= pages - 1 ? " disabled" : ""}>next ›</button>`,
  };
}

function dataTable(id, spec) {
  const old = TABLES.get(id);
  const state = old ? { ...old, spec } : {
    spec, sort: spec.sort || null, desc: spec.desc ?? false, filter: "", page: 0, pageSize: spec.pageSize || 25,
  };
  TABLES.set(id, state);
  const parts = dtBody(id);
  return `<div class="dt" id="dt-${dtEsc(id)}" data-dt="${dtEsc(id)}">
    <div class="dt-controls"><input class="dt-filter" type="search" placeholder="filter rows" value="${dtEsc(state.filter)}" aria-label="filter rows">
      <label>rows <select class="dt-size">${PAGE_SIZES.map((n) => `<option${n === state.pageSize ? " selected" : ""}>${n}</option>`).join("")}</select></label>
      <span class="dt-pager">${parts.pager}</span></div>
    <div class="dt-table">${parts.table}</div></div>`;
}

function dtRedraw(id) {
  const el = document.querySelector(`.dt[data-dt="${CSS.escape(id)}"]`);
  if (!el) return;
  const parts = dtBody(id);
  el.querySelector(".dt-table").innerHTML = parts.table;
  el.querySelector(".dt-pager").innerHTML = parts.pager;
}

document.addEventListener("click", (e) => {
  const box = e.target.closest(".dt"); if (!box) return;
  const id = box.dataset.dt, state = TABLES.get(id); if (!state) return;
  const th = e.target.closest("th[data-dt-sort]");
  if (th) {
    const key = th.dataset.dtSort;
    if (state.sort === key) state.desc = !state.desc;
    else { state.sort = key; state.desc = !!(state.spec.columns.find((c) => c.key === key) || {}).num; }
    state.page = 0; dtRedraw(id); return;
  }
  const step = e.target.closest("button[data-dt-page]");
  if (step) { state.page += Number(step.dataset.dtPage); dtRedraw(id); }
});
document.addEventListener("input", (e) => {
  if (!e.target.classList.contains("dt-filter")) return;
  const id = e.target.closest(".dt").dataset.dt, state = TABLES.get(id);
  state.filter = e.target.value; state.page = 0; dtRedraw(id);
});
document.addEventListener("change", (e) => {
  if (!e.target.classList.contains("dt-size")) return;
  const id = e.target.closest(".dt").dataset.dt, state = TABLES.get(id);
  state.pageSize = Number(e.target.value); state.page = 0; dtRedraw(id);
});
