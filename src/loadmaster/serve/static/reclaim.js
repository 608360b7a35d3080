// loadmaster dashboard: the reclaim ledger. Operators approve, exempt and undo its entries (the server
// checks the role and what each entry allows: POST /api/operator/ledger/{id}/{approve|exempt|undo});
// owners see the notices of their own jobs on "My jobs". Uses app.js's api, esc, table, fmtTime.
// Test hooks: #ledger[data-entries], rows [data-testid=ledger-row][data-action], buttons [data-act].

const RECLAIM_ACTIONS = {
  approve: (e) => e.action === "notify" || e.action === "notify (dry run)",
  exempt: (e) => ["notify", "notify (dry run)", "mark", "mark (dry run)", "evict (dry run)"].includes(e.action),
  undo: (e) => ["exempt", "approve", "mark"].includes(e.action),
};
const RECLAIM_TITLES = {
  approve: "carry the pending action out now, for real even under a dry-run policy",
  exempt: "exempt this job from reclaim until it ends",
  undo: "undo this exemption, approval or mark",
};

function ledgerRow(e, withButtons) {
  const buttons = withButtons ? Object.entries(RECLAIM_ACTIONS).filter(([, allowed]) => allowed(e))
    .map(([act]) => `<button data-act="${act}" data-entry="${e.id}" title="${RECLAIM_TITLES[act]}">${act}</button>`).join(" ") : "";
  return `<tr data-testid="ledger-row" data-entry="${e.id}" data-action="${esc(e.action)}" data-job="${esc(e.job)}">
    <td>${fmtTime(e.at_s)}</td><td><a data-job="${esc(e.job)}">${esc(e.job)}</a></td><td>${esc(e.owner)}</td>
    <td>${esc(e.action)}${e.ref ? ` <span class="muted">(#${e.ref})</span>` : ""}</td><td>${esc(e.actor)}</td>
    <td class="num">${e.gpus}</td><td class="num">${e.idle_gpu_hours.toFixed(1)}</td><td class="reason">${esc(e.reason)}</td>
    ${withButtons ? `<td>${buttons}</td>` : ""}</tr>`;
}

async function showLedger() { // operator view: the ledger with its actions
  const el = document.getElementById("ledger");
  if (!el) return;
  const r = await api("/api/operator/ledger?limit=200");
  el.dataset.entries = String(r.entries.length);
  el.innerHTML = `<h3>Reclaim ledger: ${r.entries.length} entries, newest first</h3>
    <p class="muted">who did what to which job, when and why; act on an entry with its buttons</p>
    <p class="error" id="ledger-error" hidden></p>
    ${table(["when", "job", "owner", "action", "by", "GPUs", "idle GPU-h", "why", ""], r.entries.map((e) => ledgerRow(e, true)))}`;
  el.querySelectorAll("button[data-act]").forEach((button) => {
    button.onclick = async () => {
      button.disabled = true;
      try {
        await api(`/api/operator/ledger/${button.dataset.entry}/${button.dataset.act}`, { method: "POST" });
        await showLedger();
      } catch (error) {
        const note = document.getElementById("ledger-error");
        note.textContent = `${button.dataset.act} refused: ${error.message}`;
        note.hidden = false;
        button.disabled = false;
      }
    };
  });
}

async function showNotices() { // "My jobs": what the reclaim policy found and will do to the caller's jobs
  const el = document.getElementById("my-reclaim");
  if (!el) return;
  const r = await api("/api/me/reclaim?limit=50");
  el.dataset.entries = String(r.entries.length);
  el.innerHTML = r.entries.length ? `<h3>Reclaim notices for your jobs (idle GPUs)</h3>
    ${table(["when", "job", "owner", "action", "by", "GPUs", "idle GPU-h", "why"], r.entries.map((e) => ledgerRow(e, false)))}` : "";
}
