// RCLL console: plain JavaScript over the HTTP API of `rcll serve`. No build step, no dependencies.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const TOKEN_KEY = "rcll.token";
const PAGE = 50;
const CHANNELS = ["dense", "lexical", "graph", "temporal", "entity", "session", "context"];

const state = { me: null, bank: null, view: null, plan: null, stats: null, unitsOffset: 0, unitsQuery: {},
  forget: null, forgetBy: null };

// -- helpers -----------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k === "style") node.style.cssText = v;   // CSSOM: the page's CSP refuses style attributes
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined && c !== false) node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

const dash = (v) => (v === null || v === undefined || v === "" ? "—" : v);
const num = (v, digits) => (v === null || v === undefined ? "—" : Number(v).toFixed(digits));
const when = (v) => (v ? new Date(v).toISOString().slice(0, 16).replace("T", " ") : "—");
const entries = (obj) => Object.entries(obj || {}).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));

function say(message, kind = "") {
  const s = $("#status");
  s.textContent = message || "";
  s.className = "status " + kind;
}

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? `${body.field ? body.field + ": " : ""}${body.error}` : `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

async function api(path, { method = "GET", params = null, body = null, raw = false } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== null && v !== undefined && v !== "") url.searchParams.append(k, v);
  }
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  if (body !== null) headers["Content-Type"] = "application/json";
  const r = await fetch(url, { method, headers, body: body === null ? null : JSON.stringify(body) });
  if (!r.ok) {
    let b = null;
    try { b = await r.json(); } catch (_) { b = null; }
    throw new ApiError(r.status, b);
  }
  return raw ? r : r.json();
}

function fail(e) {
  if (e instanceof ApiError && e.status === 401) {
    askToken(e.message);
    return;
  }
  say(e.message + (e.body && e.body.hint ? ` — ${e.body.hint}` : ""), "error");
}

// What a refusal says, for a dialog: the code, the field, the message and the server's hint.
function problem(e) {
  const code = e instanceof ApiError && e.body.code ? `${e.body.code} · ` : "";
  return code + e.message + (e.body && e.body.hint ? ` — ${e.body.hint}` : "");
}

function fill(tbody, rows, empty) {
  tbody.replaceChildren(...rows);
  if (!rows.length) {
    const cols = tbody.closest("table").querySelectorAll("thead th").length;
    tbody.append(el("tr", {}, el("td", { colspan: cols, class: "muted" }, empty)));
  }
}

// -- identity ----------------------------------------------------------------------------------

function askToken(message) {
  const d = $("#token-dialog");
  $("#token-error").textContent = message || "";
  $("#token").value = "";
  if (!d.open) d.showModal();
  $("#token").focus();
}

async function whoami() {
  let me;
  try {
    me = await api("/whoami");
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      askToken("That token is not known to this server.");
      return null;
    }
    throw e;
  }
  state.me = me;
  $("#token-button").hidden = !me.auth_required;
  if (me.auth_required && !me.authenticated) {
    askToken("");
    return null;
  }
  const who = me.agent ? me.agent : "anonymous";
  $("#who").textContent = `${who} · ${me.read_only ? "read-only" : "read-write"}` +
    (me.can_decide_merges ? " · may decide merges" : "");
  document.body.classList.toggle("read-only", !!me.read_only);
  return me;
}

// -- views -------------------------------------------------------------------------------------

async function loadBankData() {
  const [plan, stats, tags, health] = await Promise.all([
    api("/floor-plan", { params: { bank: state.bank } }),
    api("/stats", { params: { bank: state.bank } }),
    api("/tags", { params: { bank: state.bank } }),
    api("/health").catch(() => null),
  ]);
  state.plan = plan;
  state.stats = stats;
  state.health = health;
  $("#room-list").replaceChildren(...plan.rooms.filter((r) => r.name).map((r) => el("option", { value: r.name })));
  $("#tag-list").replaceChildren(...tags.tags.slice(0, 500).map((t) => el("option", { value: t.tag })));
  $("#author-list").replaceChildren(...Object.keys(stats.author || {}).filter((a) => a !== "(none)").sort()
    .map((a) => el("option", { value: a })));
  const options = (sel, values, anyLabel) => {
    $(sel).replaceChildren(el("option", { value: "" }, anyLabel), ...values.map((v) => el("option", { value: v }, v)));
  };
  options("#units-form [name=hall]", Object.keys(stats.hall || {}).filter((h) => h !== "(untyped)").sort(), "any");
  options("#units-form [name=author]", Object.keys(stats.author || {}).filter((a) => a !== "(none)").sort(), "any");
  const pending = plan.rooms.filter((r) => r.proposed_into).length;
  const count = $("#merge-count");
  count.hidden = pending === 0;
  count.textContent = pending;
  count.setAttribute("aria-label", `${pending} pending`);
}

function tileSize(n, max) {
  // Log scale: room sizes have a long tail, and an empty room should still be visible.
  if (!n || !max) return 1;
  const share = Math.log1p(n) / Math.log1p(max);
  return share > 0.8 ? 4 : share > 0.55 ? 3 : 2;
}

// What the periodic jobs are doing with big banks' own HNSW indexes (/health's upkeep.dense_indexes).
function indexesLine(health) {
  const jobs = health && health.upkeep;
  if (!jobs || !jobs.dense_indexes) return "Dense indexes: this server runs no periodic jobs (rcll upkeep from cron builds them).";
  const g = jobs.dense_indexes;
  if (!g.auto) return "Dense indexes: left to the DBA (RCLL_AUTO_DENSE_INDEXES=off; rcll dense-indexes --apply).";
  if (g.building) {
    const b = Array.isArray(g.index_builds) ? g.index_builds[0] : null;
    const read = b && b.blocks_total ? `, ${Math.round((100 * b.blocks_done) / b.blocks_total)}% of the table read` : "";
    return `Dense indexes: building, step ${g.building.step} of ${g.building.steps}` +
      (g.building.why ? `: ${g.building.why}` : "") + (b ? ` (${b.phase}${read})` : "") + ".";
  }
  if (g.last_error) return `Dense indexes: the last run did not finish: ${g.last_error}`;
  if (!g.last_end) return "Dense indexes: not checked yet.";
  return `Dense indexes: checked ${new Date(g.last_end).toLocaleString()}` +
    (g.last_steps.length ? `, ${g.last_steps.length} step(s) run.` : ", nothing to build.");
}

function renderPlan() {
  const rooms = state.plan.rooms;
  const t = state.stats.totals || {};
  const live = rooms.filter((r) => r.name && r.fact_count > 0).length;
  $("#plan-summary").textContent = `${t.units ?? 0} units from ${t.documents ?? 0} documents in ${live} rooms ` +
    `(${rooms.filter((r) => r.name).length} listed, including the classifier's vocabulary).`;
  $("#plan-indexes").textContent = indexesLine(state.health);
  const max = Math.max(0, ...rooms.map((r) => r.fact_count || 0));
  const tiles = rooms.map((r) => {
    const size = tileSize(r.fact_count, max);
    const name = r.name === null ? "(no room)" : r.name;
    const badge = r.status === "merged" ? `merged into ${r.merged_into}`
      : r.proposed_into ? `merge proposed into ${r.proposed_into}`
      : r.status === "none" ? "units filed in no room" : null;
    const authors = entries(r.authors).slice(0, 3).map(([a, n]) => `${a} ${n}`).join(", ");
    const halls = entries(r.halls).slice(0, 3).map(([h, n]) => `${h} ${n}`).join(", ");
    const layers = ["L0", "L1", "L2"].map((l) => `${l} ${(r.layers || {})[l] || 0}`).join(" · ");
    const body = [
      el("span", { class: "tile-name" }, name),
      el("span", { class: "tile-count" }, `${r.fact_count} unit${r.fact_count === 1 ? "" : "s"}`),
      badge && el("span", { class: "badge" }, badge),
      r.aliases && r.aliases.length ? el("span", { class: "tile-line" }, "aka " + r.aliases.slice(0, 4).join(", ") +
        (r.aliases.length > 4 ? ` +${r.aliases.length - 4}` : "")) : null,
      r.fact_count ? el("span", { class: "tile-line" }, layers) : null,
      halls ? el("span", { class: "tile-line" }, "halls: " + halls) : null,
      authors ? el("span", { class: "tile-line" }, "by " + authors) : null,
    ];
    const attrs = { class: `tile size-${size} status-${r.status}`, type: "button", dataset: { room: name } };
    const node = r.name === null || r.status === "merged"
      ? el("div", { ...attrs, type: null }, body)
      : el("button", { ...attrs, onclick: () => browseRoom(r.name) }, body);
    return el("li", { class: `size-${size}` }, node);
  });
  $("#plan-tiles").replaceChildren(...tiles);
}

function browseRoom(room) {
  const f = $("#units-form");
  f.reset();
  f.room.value = room;
  state.unitsQuery = { room };
  state.unitsOffset = 0;
  location.hash = "#units";
}

async function loadUnits() {
  const q = state.unitsQuery;
  const params = { bank: state.bank, limit: PAGE, offset: state.unitsOffset, ...q };
  if (q.from) params.from = q.from + "T00:00:00Z";
  if (q.to) params.to = q.to + "T00:00:00Z";
  const out = await api("/units", { params });
  const rows = out.units.map((u) => el("tr", { dataset: { unitId: u.unit_id } },
    el("td", { class: "nowrap" }, when(u.at)),
    el("td", {}, dash(u.room)), el("td", {}, dash(u.hall)), el("td", {}, u.layer),
    el("td", {}, dash(u.author)), el("td", {}, dash(u.thread)),
    el("td", { class: "text" }, u.text, u.superseded_by ? el("span", { class: "badge" }, `superseded by ${u.superseded_by}`) : null,
      u.tags.length ? el("span", { class: "tags" }, u.tags.join(" ")) : null),
    el("td", {}, mayForget() ? el("button", { type: "button", class: "row-forget",
      "aria-label": `Forget unit ${u.unit_id}…`, onclick: () => openForget(u) }, "Forget…") : null)));
  fill($("#units-table tbody"), rows, "No units match these filters.");
  $("#forget-by-open").hidden = !mayForget();
  const first = out.total ? state.unitsOffset + 1 : 0;
  $("#units-summary").textContent = `${first}–${state.unitsOffset + out.units.length} of ${out.total} units`;
  $("#units-prev").disabled = state.unitsOffset === 0;
  $("#units-next").disabled = state.unitsOffset + out.units.length >= out.total;
}

// The recall form offers every field of POST /recall's body, read from the server's own schema
// (RecallBody in /openapi.json: one field per rcll.request.RecallRequest field), so the page
// cannot fall behind the request. The bank and the query come from the page.
const RECALL_FIRST = ["rooms", "budget", "deadline_ms"];
const RECALL_FROM_PAGE = ["bank", "query", "explain"];
let recallFields = null;

function fieldKind(prop) {
  const s = (prop.type ? [prop] : (prop.anyOf || []).filter((x) => x.type !== "null"))[0] || {};
  if (s.type === "array") return "list";
  if (s.type === "boolean") return "flag";
  if (s.type === "integer" || s.type === "number") return "number";
  if (s.type === "object") return "weights";
  if (s.format === "date-time") return "time";
  return "text";
}

function fieldInputs(f) {
  const title = f.prop.description || "";
  const label = f.name.replaceAll("_", " ");
  const given = f.prop.default;
  if (f.kind === "weights") {
    return CHANNELS.map((c) => el("label", { title }, `${c} weight`, el("input", {
      name: `weights.${c}`, type: "number", min: "0", step: "any",
      placeholder: given && given[c] !== undefined ? String(given[c]) : "" })));
  }
  if (f.kind === "flag") {
    return [el("label", { class: "check", title }, el("input", { name: f.name, type: "checkbox" }), label)];
  }
  const attrs = { name: f.name, placeholder: given === null || given === undefined ? "" : String(given) };
  if (f.kind === "number") Object.assign(attrs, { type: "number", min: "0", step: "1" });
  if (f.kind === "time") attrs.type = "datetime-local";
  if (f.kind === "list") attrs.placeholder = "comma-separated";
  if (f.name === "rooms") attrs.list = "room-list";
  if (f.name === "deadline_ms") attrs.placeholder = "server default";
  return [el("label", { title }, label, el("input", attrs))];
}

async function recallForm() {
  if (recallFields) return;
  const spec = await api("/openapi.json");
  const props = spec.components.schemas.RecallBody.properties;
  recallFields = Object.entries(props).filter(([name]) => !RECALL_FROM_PAGE.includes(name))
    .map(([name, prop]) => ({ name, prop, kind: fieldKind(prop) }));
  for (const f of recallFields) {
    $(RECALL_FIRST.includes(f.name) ? "#recall-fields" : "#recall-more-fields").append(...fieldInputs(f));
  }
}

// The one place the page builds a recall: every field given in the form (the others at their defaults).
function recallBody(form) {
  const body = { bank: state.bank, query: form.query.value, explain: true };
  for (const f of recallFields) {
    if (f.kind === "weights") {
      const w = {};
      for (const c of CHANNELS) {
        const v = form.elements[`weights.${c}`].value;
        if (v !== "") w[c] = Number(v);
      }
      if (Object.keys(w).length) body.weights = w;
      continue;
    }
    const input = form.elements[f.name];
    if (f.kind === "flag") {
      if (input.checked) body[f.name] = true;
      continue;
    }
    const v = input.value.trim();
    if (v === "") continue;
    if (f.kind === "list") body[f.name] = v.split(",").map((x) => x.trim()).filter(Boolean);
    else if (f.kind === "number") body[f.name] = Number(v);
    else if (f.kind === "time") body[f.name] = v + (v.length === 16 ? ":00Z" : "Z");
    else body[f.name] = v;
  }
  return body;
}

async function runRecall(form) {
  await recallForm();
  const body = recallBody(form);
  say("Recalling…");
  const out = await api("/recall", { method: "POST", body });
  say("");
  const rank = (f, c) => el("td", { class: "num", dataset: { channel: c } }, dash(f["rank_" + c]));
  const rows = out.facts.map((f, i) => el("tr", { dataset: { unitId: f.unit_id } },
    el("td", { class: "num" }, i + 1), el("td", { class: "text" }, f.text), el("td", {}, dash(f.room)),
    el("td", {}, dash(f.author)), CHANNELS.map((c) => rank(f, c)),
    el("td", { class: "num", dataset: { score: "fused" } }, num(f.fused_score, 4)),
    el("td", { class: "num", dataset: { score: "rerank" } }, num(f.rerank_score, 2)),
    el("td", { class: "num" }, f.tokens)));
  fill($("#recall-table tbody"), rows, "Nothing recalled.");
  const t = out.timings_ms || {};
  const phases = { embed: "Embed query", sql: "Channels + fusion (SQL)", rerank: "Cross-encoder", cut: "Budget cut" };
  const total = Object.keys(phases).reduce((s, k) => s + (t[k] || 0), 0);
  $("#recall-timings").replaceChildren(
    ...Object.entries(phases).map(([k, label]) => el("div", { class: `phase phase-${k}` },
      el("dt", {}, label), el("dd", { dataset: { phase: k } }, `${num(t[k], 1)} ms`))),
    el("div", { class: "phase" }, el("dt", {}, "Total"), el("dd", { dataset: { phase: "total" } }, `${num(total, 1)} ms`)));
  $("#recall-stack").replaceChildren(...Object.keys(phases).map((k) =>
    el("span", { class: `phase-${k}`, style: `width:${total ? (100 * (t[k] || 0)) / total : 0}%`, title: phases[k] })));
  const cut = out.cut || [];
  const depth = out.rerank_depth_reached ?? null;
  $("#recall-summary").textContent = `${out.facts.length} units returned (${out.tokens} of ${out.budget ?? body.budget} tokens) ` +
    `from ${out.candidates} candidates.` + (depth === null ? "" : ` The cross-encoder read ${depth}` +
    ` (${out.context_depth_reached ?? 0} again with the chunk before them)` +
    (out.deadline_cut ? `; the ${out.deadline_ms} ms deadline stopped it there — the rest keep their fused order.` : "."));
  $("#cut-summary").textContent = cut.length
    ? `${cut.length} ranked candidates did not fit the budget or the limit (${cut.reduce((s, f) => s + f.tokens, 0)} tokens).`
    : "Nothing was cut.";
  fill($("#cut-table tbody"), cut.map((f) => el("tr", { dataset: { unitId: f.unit_id } },
    el("td", { class: "num" }, f.rank), el("td", { class: "text" }, f.text),
    el("td", { class: "num" }, num(f.rerank_score, 2)), el("td", { class: "num" }, num(f.fused_score, 4)),
    el("td", { class: "num" }, f.tokens))), "Nothing was cut.");
  $("#recall-out").hidden = false;
}

async function loadMerges() {
  const out = await api("/merges", { params: { bank: state.bank, include_decided: true } });
  const canDecide = state.me && state.me.can_decide_merges;
  const note = $("#merges-readonly");
  note.hidden = canDecide;
  const me = state.me || {};
  note.textContent = me.read_only ? "This server is read-only: decide merges on a read-write server."
    : me.person === null ? "Your token names an agent; only a person decides merges (a token mapped to person:<name>)."
    : "Your token does not grant the admin verb, which deciding a merge needs.";
  const pending = out.proposals.filter((p) => p.status === "pending");
  const decided = out.proposals.filter((p) => p.status !== "pending");
  fill($("#merges-table tbody"), pending.map((p) => {
    const label = `${p.from_room} → ${p.into_room}`;
    const decide = !canDecide ? el("span", { class: "muted" }, "—") : el("div", { class: "decide" },
      el("button", { type: "button", class: "approve", "aria-label": `Approve merge ${label}`,
        onclick: () => decideMerge(p, "approve") }, "Approve"),
      el("form", { class: "reject", onsubmit: (ev) => { ev.preventDefault(); decideMerge(p, "reject", ev.target.reason.value); } },
        el("label", { class: "sr-only", for: `reason-${p.proposal_id}` }, `Reason to reject ${label}`),
        el("input", { id: `reason-${p.proposal_id}`, name: "reason", placeholder: "reason (optional)" }),
        el("button", { type: "submit", class: "secondary" }, "Reject")));
    return el("tr", { dataset: { fromRoom: p.from_room } },
      el("td", {}, el("strong", {}, p.from_room), " → ", p.into_room), el("td", {}, p.reason),
      el("td", {}, p.proposed_by), el("td", { class: "nowrap" }, when(p.proposed_at)),
      el("td", { class: "num" }, p.from_units), el("td", {}, decide));
  }), "No merge is waiting for a decision.");
  fill($("#decided-table tbody"), decided.map((p) => el("tr", { dataset: { fromRoom: p.from_room } },
    el("td", {}, `${p.from_room} → ${p.into_room}`), el("td", { class: `decision ${p.status}` }, p.status),
    el("td", {}, dash(p.decided_by)), el("td", { class: "nowrap" }, when(p.decided_at)), el("td", {}, p.reason))),
  "No decisions yet.");
}

async function decideMerge(p, decision, reason) {
  const out = await api("/merges/decide", { method: "POST",
    body: { bank: state.bank, from_room: p.from_room, decision, reason: reason || null } });
  say(decision === "approve"
    ? `Approved: ${out.moved} unit(s) moved from ${p.from_room} into ${p.into_room}; "${p.from_room}" stays readable as an alias.`
    : `Rejected: ${p.from_room} stays a room of its own.`, "ok");
  await loadBankData();
  await loadMerges();
  const first = $("#merges-table button, #merges-title");
  if (first) first.focus();
}

// -- forget: a unit, its document or its thread, after a dry run's count and a confirmation ------

function mayForget() {
  const me = state.me || {};
  return !me.read_only && (me.can || []).includes("forget");
}

function forgetTarget(what) {
  const u = state.forget;
  if (what === "document") return `/documents/${u.document_id}`;
  if (what === "thread") return `/threads/${encodeURIComponent(u.thread)}`;
  return `/units/${u.unit_id}`;
}

function forgetWhat() {
  return $("#forget-form").what.value || "unit";
}

// A dry run's counts in a dialog's table (prefix: #forget or #forget-by); the number of units.
function showCounts(prefix, counts) {
  const rows = Object.entries(counts).filter(([, n]) => n > 0);
  fill($(`${prefix}-counts tbody`), rows.map(([kind, n]) =>
    el("tr", { dataset: { kind } }, el("td", {}, kind.replaceAll("_", " ")), el("td", { class: "num" }, n))), "Nothing.");
  $(`${prefix}-counts`).hidden = false;
  const units = counts.units || 0;
  $(`${prefix}-summary`).textContent = `${units} unit${units === 1 ? "" : "s"} and what was derived from them would be ` +
    "forgotten. This cannot be undone.";
  return units;
}

function forgottenLine(counts) {
  return `Forgotten: ${Object.entries(counts).filter(([, n]) => n > 0).map(([k, n]) => `${n} ${k.replaceAll("_", " ")}`).join(", ")}.`;
}

// The dry run: DELETE ... ?dry_run=true answers what would go, counted per kind, and changes nothing.
async function forgetCount() {
  const what = forgetWhat();
  const confirm = $("#forget-confirm");
  confirm.disabled = true;
  $("#forget-error").textContent = "";
  $("#forget-counts").hidden = true;
  $("#forget-summary").textContent = "Counting what would go…";
  try {
    const out = await api(forgetTarget(what), { method: "DELETE", params: { bank: state.bank, dry_run: true } });
    const units = showCounts("#forget", out.counts);
    confirm.textContent = `Forget ${units} unit${units === 1 ? "" : "s"}`;
    confirm.disabled = false;
  } catch (e) {
    $("#forget-summary").textContent = "";
    $("#forget-error").textContent = problem(e);
  }
  document.body.dataset.forget = `counted-${what}`;
}

function openForget(u) {
  state.forget = u;
  const f = $("#forget-form");
  f.reset();
  $("#forget-text").textContent = u.text.length > 240 ? u.text.slice(0, 240) + "…" : u.text;
  $("#forget-unit").textContent = `This unit (#${u.unit_id})`;
  $("#forget-document").textContent = u.document_id ? `Its whole document (#${u.document_id})` : "Its whole document";
  $("#forget-thread").textContent = u.thread ? `Its whole thread (${u.thread})` : "Its whole thread (it has none)";
  f.querySelector("[value=document]").disabled = !u.document_id;
  f.querySelector("[value=thread]").disabled = !u.thread;
  $("#forget-confirm").textContent = "Forget";
  delete document.body.dataset.forget;
  $("#forget-dialog").showModal();
  forgetCount();
}

async function confirmForget() {
  const what = forgetWhat();
  const reason = $("#forget-reason").value.trim();
  $("#forget-confirm").disabled = true;
  try {
    const out = await api(forgetTarget(what), { method: "DELETE",
      params: { bank: state.bank, dry_run: false, reason: reason || null } });
    $("#forget-dialog").close();
    say(forgottenLine(out.counts), "ok");
    await loadBankData();
    await loadUnits();
    document.body.dataset.forget = `forgotten-${what}`;
    $("#units-title").focus();
  } catch (e) {
    $("#forget-error").textContent = problem(e);
  }
}

// -- forget by selector: every field of POST /forget's body, read from the server's schema -------
// (ForgetRequest in /openapi.json: one field per rcll.request.ForgetRequest field), so the dialog
// cannot fall behind the request. The bank is the page's; dry_run is the two steps: "Count" sends
// the body with dry_run true, and only then may "Forget N units" send that same body with false.
// everything must be typed as the bank's name (the API's own confirmation): never prefilled.
const FORGET_FROM_PAGE = ["bank", "dry_run"];
const FORGET_WHY = ["reason"];
const FORGET_HOW = ["batch", "purge"];
const FORGET_ALL = ["everything"];
let forgetFields = null;

function forgetKind(prop) {
  const s = (prop.type ? [prop] : (prop.anyOf || []).filter((x) => x.type !== "null"))[0] || {};
  if (s.type === "array" && s.items && s.items.type === "integer") return "ids";
  return fieldKind(prop);
}

function forgetInput(f) {
  const title = f.prop.description || "";
  const label = f.name.replaceAll("_", " ");
  if (f.kind === "flag") {
    return el("label", { class: "check", title }, el("input", { name: f.name, type: "checkbox" }), label);
  }
  const attrs = { name: f.name, autocomplete: "off", spellcheck: "false" };
  if (f.kind === "ids") attrs.placeholder = "comma-separated numbers";
  if (f.kind === "number") Object.assign(attrs, { type: "number", min: "1", step: "1", placeholder: "all at once" });
  if (f.kind === "time") Object.assign(attrs, { type: "datetime-local" });
  if (f.name === "room") attrs.list = "room-list";
  if (f.name === "tag") attrs.list = "tag-list";
  if (f.name === "author") attrs.list = "author-list";
  if (FORGET_ALL.includes(f.name)) {
    return el("label", { title }, "Type this bank's name, ", el("strong", { class: "forget-by-bank" }), ", to forget every memory of it",
      el("input", attrs));
  }
  return el("label", { title }, label + (f.kind === "time" ? " (UTC)" : ""), el("input", attrs));
}

async function forgetForm() {
  if (forgetFields) return;
  const spec = await api("/openapi.json");
  const props = spec.components.schemas.ForgetRequest.properties;
  forgetFields = Object.entries(props).filter(([name]) => !FORGET_FROM_PAGE.includes(name))
    .map(([name, prop]) => ({ name, prop, kind: forgetKind(prop) }));
  for (const f of forgetFields) {
    const where = FORGET_WHY.includes(f.name) ? "#forget-by-why" : FORGET_HOW.includes(f.name) ? "#forget-by-how-fields"
      : FORGET_ALL.includes(f.name) ? "#forget-by-all-fields" : "#forget-by-fields";
    $(where).append(forgetInput(f));
  }
}

class FormProblem extends Error {
  constructor(field, message, hint) {
    super(`${field}: ${message}`);
    this.body = { hint };
  }
}

// The one place the page builds a forget: the bank and every field given in the dialog.
function forgetByBody(form) {
  const body = { bank: state.bank };
  for (const f of forgetFields) {
    const input = form.elements[f.name];
    if (f.kind === "flag") {
      if (input.checked) body[f.name] = true;
      continue;
    }
    const v = input.value.trim();
    if (v === "") continue;
    if (f.kind === "ids") {
      const ids = v.split(/[\s,]+/).filter(Boolean);
      const bad = ids.find((x) => !/^[0-9]{1,19}$/.test(x));
      if (bad !== undefined) throw new FormProblem(f.name, `"${bad}" is not an id`, "give whole numbers, separated by commas");
      body[f.name] = ids.map(Number);
    } else if (f.kind === "number") body[f.name] = Number(v);
    else if (f.kind === "time") body[f.name] = v + (v.length === 16 ? ":00Z" : "Z");
    else body[f.name] = v;
  }
  return body;
}

// A count stands for the body it counted: any change to the dialog asks for a new count.
function forgetByStale() {
  if (!state.forgetBy) return;
  state.forgetBy = null;
  const confirm = $("#forget-by-confirm");
  confirm.disabled = true;
  confirm.textContent = "Forget";
  $("#forget-by-counts").hidden = true;
  $("#forget-by-summary").textContent = "Changed since the count: count again.";
  delete document.body.dataset.forget;
}

async function openForgetBy() {
  await forgetForm();
  const f = $("#forget-by-form");
  f.reset();
  state.forgetBy = null;
  for (const b of document.querySelectorAll(".forget-by-bank")) b.textContent = state.bank;
  $("#forget-by-all").open = false;
  $("#forget-by-counts").hidden = true;
  $("#forget-by-summary").textContent = "";
  $("#forget-by-error").textContent = "";
  $("#forget-by-confirm").disabled = true;
  $("#forget-by-confirm").textContent = "Forget";
  $("#forget-by-title").textContent = `Forget by selector in ${state.bank}`;
  delete document.body.dataset.forget;
  $("#forget-by-dialog").showModal();
  $("#forget-by-fields input").focus();
}

async function forgetByCount() {
  const confirm = $("#forget-by-confirm");
  state.forgetBy = null;
  confirm.disabled = true;
  confirm.textContent = "Forget";
  $("#forget-by-error").textContent = "";
  $("#forget-by-counts").hidden = true;
  try {
    const body = forgetByBody($("#forget-by-form"));
    $("#forget-by-summary").textContent = "Counting what would go…";
    const out = await api("/forget", { method: "POST", body: { ...body, dry_run: true } });
    const units = showCounts("#forget-by", out.counts);
    state.forgetBy = body;
    confirm.textContent = `Forget ${units} unit${units === 1 ? "" : "s"}`;
    confirm.disabled = false;
    confirm.scrollIntoView({ block: "nearest" });
    document.body.dataset.forget = "counted-selector";
  } catch (e) {
    $("#forget-by-summary").textContent = "";
    $("#forget-by-error").textContent = problem(e);
    document.body.dataset.forget = "refused-selector";
  }
}

async function confirmForgetBy() {
  const body = state.forgetBy;
  if (!body) return;
  $("#forget-by-confirm").disabled = true;
  $("#forget-by-count").disabled = true;
  try {
    const out = await api("/forget", { method: "POST", body: { ...body, dry_run: false } });
    document.body.dataset.forget = "forgetting-selector";     // the focus goes to the reloaded list, not the opener
    $("#forget-by-dialog").close();
    state.forgetBy = null;
    say(forgottenLine(out.counts) + (out.purged.length ? ` Vacuumed: ${out.purged.join(", ")}.` : ""), "ok");
    state.unitsOffset = 0;
    await loadBankData();
    await loadUnits();
    document.body.dataset.forget = "forgotten-selector";
    $("#units-title").setAttribute("tabindex", "-1");
    $("#units-title").focus();
  } catch (e) {
    $("#forget-by-error").textContent = problem(e);
    $("#forget-by-confirm").disabled = false;
  } finally {
    $("#forget-by-count").disabled = false;
  }
}

// -- retention ---------------------------------------------------------------------------------

function span(seconds) {
  const units = [[86400, "day"], [3600, "hour"], [60, "minute"], [1, "second"]];
  for (const [size, name] of units) {
    if (seconds >= size && seconds % size === 0) {
      const n = seconds / size;
      return `${n} ${name}${n === 1 ? "" : "s"}`;
    }
  }
  return `${seconds} seconds`;
}

async function loadRetention() {
  const out = await api("/retention", { params: { bank: state.bank } });
  fill($("#retention-table tbody"), out.policies.map((p) => el("tr", {},
    el("td", {}, p.room || "any"), el("td", {}, p.hall || "any"), el("td", {}, p.layer || "any"),
    el("td", { dataset: { keep: p.keep } }, `${span(p.keep_seconds)} `, el("code", {}, p.keep)),
    el("td", { class: "num" }, p.units), el("td", { class: "num" }, p.expired),
    el("td", {}, dash(p.created_by)), el("td", { class: "nowrap" }, when(p.created_at)))),
  "No retention policy: units are kept until they are forgotten (or their own expiry passes).");
}

async function loadState() {
  const out = await api("/state/keys", { params: { bank: state.bank } });
  fill($("#state-table tbody"), out.keys.map((k) => el("tr", {},
    el("td", {}, k.room),
    el("td", {}, el("button", { type: "button", class: "link", onclick: () => loadHistory(k.room, k.key) }, k.key)),
    el("td", { class: "num" }, k.version), el("td", {}, el("code", {}, JSON.stringify(k.value))),
    el("td", {}, dash(k.provenance && k.provenance.who)), el("td", { class: "nowrap" }, when(k.created_at)))),
  "No keyed state in this bank.");
  $("#history").hidden = true;
}

async function loadHistory(room, key) {
  const out = await api("/state/history", { params: { bank: state.bank, room, key } });
  $("#history-title").textContent = `History of ${room} / ${key}`;
  fill($("#history-table tbody"), out.versions.map((v) => el("tr", {},
    el("td", { class: "num" }, v.version), el("td", {}, el("code", {}, JSON.stringify(v.value))),
    el("td", {}, dash(v.provenance.who)), el("td", {}, dash(v.provenance.via)),
    el("td", { class: "nowrap" }, when(v.created_at)))), "No versions.");
  $("#history").hidden = false;
  $("#history-title").setAttribute("tabindex", "-1");
  $("#history-title").focus();
}

async function downloadExport() {
  const status = $("#export-status");
  status.textContent = "Exporting…";
  const r = await api("/export", { params: { bank: state.bank }, raw: true });
  const blob = await r.blob();
  const a = el("a", { href: URL.createObjectURL(blob), download: `${state.bank}.rcll.ndjson` });
  document.body.append(a);
  a.click();
  a.remove();
  status.textContent = `Downloaded ${state.bank}.rcll.ndjson (${blob.size.toLocaleString()} bytes).`;
}

// -- routing -----------------------------------------------------------------------------------

const VIEWS = {
  plan: renderPlan,
  units: loadUnits,
  recall: recallForm,
  merges: loadMerges,
  state: loadState,
  retention: loadRetention,
  export: async () => { $("#export-name").textContent = `${state.bank}.rcll.ndjson`; },
};

async function show(view, focus = true) {
  if (!VIEWS[view]) view = "plan";
  state.view = view;
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.dataset.view !== view;
  for (const a of document.querySelectorAll(".tabs a")) {
    if (a.dataset.view === view) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (!state.bank) return;
  try {
    await VIEWS[view]();
    document.body.dataset.ready = view;
  } catch (e) {
    fail(e);
  }
  if (focus) {
    const h = $(`#view-${view} h2`);
    h.setAttribute("tabindex", "-1");
    h.focus();
  }
}

async function start() {
  say("");
  try {
    if (!(await whoami())) return;
    const { banks } = await api("/banks");
    const select = $("#bank");
    const wanted = new URLSearchParams(location.search).get("bank") || state.bank || "default";
    select.replaceChildren(...banks.map((b) => el("option", { value: b.name }, `${b.name} (${b.unit_count})`)));
    if (!banks.length) {
      say("No banks yet: retain something first (rcll retain, POST /retain).");
      return;
    }
    state.bank = banks.some((b) => b.name === wanted) ? wanted : banks[0].name;
    select.value = state.bank;
    await loadBankData();
    await show(location.hash.slice(1) || "plan", false);
  } catch (e) {
    fail(e);
  }
}

function wire() {
  $("#token-form").addEventListener("submit", () => {
    sessionStorage.setItem(TOKEN_KEY, $("#token").value.trim());
    start();
  });
  $("#token-button").addEventListener("click", () => askToken(""));
  $("#bank").addEventListener("change", async (ev) => {
    state.bank = ev.target.value;
    state.unitsOffset = 0;
    try {
      await loadBankData();
      await show(state.view, false);
    } catch (e) {
      fail(e);
    }
  });
  $("#bank-form").addEventListener("submit", (ev) => ev.preventDefault());
  window.addEventListener("hashchange", () => show(location.hash.slice(1)));
  $("#units-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const data = Object.fromEntries([...new FormData(ev.target)].filter(([, v]) => String(v).trim() !== ""));
    state.unitsQuery = data;
    state.unitsOffset = 0;
    loadUnits().catch(fail);
  });
  $("#units-form").addEventListener("reset", () => {
    state.unitsQuery = {};
    state.unitsOffset = 0;
    setTimeout(() => loadUnits().catch(fail));
  });
  $("#units-prev").addEventListener("click", () => {
    state.unitsOffset = Math.max(0, state.unitsOffset - PAGE);
    loadUnits().catch(fail);
  });
  $("#units-next").addEventListener("click", () => {
    state.unitsOffset += PAGE;
    loadUnits().catch(fail);
  });
  $("#recall-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    runRecall(ev.target).then(() => { document.body.dataset.ready = "recall-done"; }).catch(fail);
  });
  $("#export-button").addEventListener("click", () => downloadExport().catch(fail));
  for (const radio of document.querySelectorAll("#forget-form [name=what]")) {
    radio.addEventListener("change", () => forgetCount());
  }
  $("#forget-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    confirmForget();
  });
  $("#forget-by-open").addEventListener("click", () => openForgetBy().catch(fail));
  $("#forget-by-form").addEventListener("submit", (ev) => {      // Enter in a field counts; it never forgets
    ev.preventDefault();
    forgetByCount();
  });
  $("#forget-by-form").addEventListener("input", forgetByStale);
  $("#forget-by-form").addEventListener("change", forgetByStale);
  $("#forget-by-confirm").addEventListener("click", () => confirmForgetBy());
  $("#forget-by-cancel").addEventListener("click", () => {
    $("#forget-by-dialog").close();
    say("Nothing was forgotten.");
  });
  $("#forget-by-dialog").addEventListener("close", () => {
    if (document.body.dataset.forget !== "forgetting-selector") $("#forget-by-open").focus();
  });
  $("#forget-cancel").addEventListener("click", () => {
    $("#forget-dialog").close();
    say("Nothing was forgotten.");
  });
}

document.addEventListener("DOMContentLoaded", () => {
  wire();
  start();
});
