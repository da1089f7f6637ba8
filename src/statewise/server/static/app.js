// statewise web page: plain JS, no build step. Talks to the same server's /v1 API.
"use strict";

const $ = (id) => document.getElementById(id);
const ui = {
  app: $("app-select"), session: $("session-select"), newSession: $("new-session"),
  messages: $("messages"), form: $("chat-form"), input: $("chat-input"), send: $("send"),
  tree: $("state-tree"), version: $("state-version"), live: $("live-dot"),
  timeline: $("timeline"), showEvents: $("show-events"), detail: $("run-detail"),
  runTitle: $("run-title"), diff: $("run-diff"), toast: $("toast"),
  keyForm: $("key-form"), keyInput: $("key-input"), whoami: $("whoami"),
  sessionLabel: $("session-label"),
};
const NEW = "";
let apps = [];
let current = { app: null, sessionId: null, runs: [], selectedRun: null, running: false };
let lastState = null;

// ---- HTTP ---------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const key = localStorage.getItem("statewise.key");
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

// The page's own folder: the API lives beside it, wherever the app is mounted (a prefix,
// a proxy's path). An absolute API path ("/v1/...") is taken relative to it.
const BASE = new URL(".", location.href);

function apiUrl(path) {
  return new URL(path.replace(/^\//, ""), BASE).toString();
}

async function api(path, opts = {}) {
  const init = { method: opts.method || "GET", headers: headers(opts.headers) };
  if (opts.body !== undefined) {
    init.body = JSON.stringify(opts.body);
    init.headers["Content-Type"] = init.headers["Content-Type"] || "application/json";
  }
  const r = await fetch(apiUrl(path), init);
  if (r.status === 401) showKeyForm();
  if (!r.ok) {
    let problem = {};
    try { problem = await r.json(); } catch (e) { problem = { detail: r.statusText }; }
    throw new ApiError(r.status, problem);
  }
  if (r.status === 204) return null;
  return r.json();
}

function toast(message, ok = false) {
  ui.toast.textContent = message;
  ui.toast.classList.toggle("ok", ok);
  ui.toast.classList.remove("hidden");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => ui.toast.classList.add("hidden"), ok ? 2500 : 6000);
}

function showKeyForm() {
  ui.keyForm.classList.remove("hidden");
  ui.keyInput.focus();
}

// ---- JSON tree ----------------------------------------------------------------------------

function pathKey(path) { return JSON.stringify(path); }

function leafSpan(value, isSecret) {
  const span = document.createElement("span");
  if (isSecret) { span.className = "secret"; span.textContent = "*** (secret)"; return span; }
  if (value === null) { span.className = "null"; span.textContent = "null"; }
  else if (typeof value === "string") { span.className = "str"; span.textContent = JSON.stringify(value); }
  else if (typeof value === "number") { span.className = "num"; span.textContent = String(value); }
  else if (typeof value === "boolean") { span.className = "bool"; span.textContent = String(value); }
  else { span.textContent = JSON.stringify(value); }
  return span;
}

function keySpan(key) {
  const k = document.createElement("span");
  k.className = "key";
  k.textContent = typeof key === "number" ? `${key}: ` : `${key}: `;
  return k;
}

// Render `value` at `path`; `open` remembers which nodes the user had open, `changed`
// holds the paths (and their parents) that the last commit touched.
function renderNode(key, value, path, open, changed) {
  const isContainer = value !== null && typeof value === "object";
  const flash = changed.has(pathKey(path));
  if (!isContainer) {
    const div = document.createElement("div");
    div.className = "leaf" + (flash ? " flash" : "");
    div.dataset.path = pathKey(path);
    if (key !== null) div.appendChild(keySpan(key));
    div.appendChild(leafSpan(value, value === "***"));
    return div;
  }
  const details = document.createElement("details");
  details.dataset.path = pathKey(path);
  const id = pathKey(path);
  details.open = open.has(id) ? open.get(id) : path.length < 3;
  const summary = document.createElement("summary");
  if (flash) summary.classList.add("flash");
  if (key !== null) summary.appendChild(keySpan(key));
  const count = document.createElement("span");
  count.className = "count";
  const n = Array.isArray(value) ? value.length : Object.keys(value).length;
  count.textContent = Array.isArray(value) ? `[${n} item${n === 1 ? "" : "s"}]` : `{${n} key${n === 1 ? "" : "s"}}`;
  summary.appendChild(count);
  details.appendChild(summary);
  const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  for (const [k, v] of entries) details.appendChild(renderNode(k, v, [...path, k], open, changed));
  return details;
}

function changedPaths(before, after, path = [], out = new Set()) {
  if (JSON.stringify(before) === JSON.stringify(after)) return out;
  out.add(pathKey(path));
  const both = before && after && typeof before === "object" && typeof after === "object";
  if (both) {
    const keys = new Set([...Object.keys(before), ...Object.keys(after)]);
    for (const k of keys) {
      const kk = Array.isArray(after) ? Number(k) : k;
      changedPaths(before[k], after[k], [...path, kk], out);
    }
  }
  return out;
}

function renderState(state, version) {
  const open = new Map();
  ui.tree.querySelectorAll("details").forEach((d) => open.set(d.dataset.path, d.open));
  const changed = lastState === null ? new Set() : changedPaths(lastState, state);
  changed.delete(pathKey([]));
  ui.tree.replaceChildren();
  const keys = Object.keys(state || {});
  if (!keys.length) {
    const empty = document.createElement("div");
    empty.className = "muted";
    empty.textContent = "(empty state)";
    ui.tree.appendChild(empty);
  }
  for (const k of keys) ui.tree.appendChild(renderNode(k, state[k], [k], open, changed));
  ui.version.textContent = version === undefined || version === null ? "" : `v${version}`;
  ui.tree.dataset.version = version ?? "";
  lastState = state;
  setTimeout(() => ui.tree.querySelectorAll(".flash").forEach((el) => el.classList.remove("flash")), 2500);
}

async function refreshState() {
  if (!current.sessionId) return;
  const body = await api(`/v1/sessions/${encodeURIComponent(current.sessionId)}/state`);
  renderState(body.state, body.version);
}

// ---- chat -----------------------------------------------------------------------------------

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = `msg ${role}`;
  div.dataset.role = role;
  div.textContent = text;
  ui.messages.appendChild(div);
  ui.messages.scrollTop = ui.messages.scrollHeight;
  return div;
}

function addStepLine(text, kind) {
  const div = document.createElement("div");
  div.className = `step-line ${kind}`;
  div.setAttribute("data-testid", kind);
  div.textContent = text;
  ui.messages.appendChild(div);
  ui.messages.scrollTop = ui.messages.scrollHeight;
  return div;
}

function addToolLine(text, member) {
  const div = document.createElement("div");
  div.className = member ? "tool member-tool" : "tool";
  div.setAttribute("data-testid", member ? "member-tool" : "tool");
  div.textContent = text;
  ui.messages.appendChild(div);
  ui.messages.scrollTop = ui.messages.scrollHeight;
  return div;
}

function renderChat(runs) {
  ui.messages.replaceChildren();
  for (const run of runs) {
    if (run.input) addMessage("user", run.input);
    for (const call of run.tool_calls || []) addToolLine(`→ ${call.name}(${JSON.stringify(call.arguments)})`);
    if (run.content !== null && run.content !== undefined) {
      addMessage("assistant", typeof run.content === "string" ? run.content : JSON.stringify(run.content));
    } else if (run.error) addMessage("error", run.error);
  }
}

// Read an SSE response body: yields {event, data} objects.
async function* readSSE(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (data) yield { event, data: JSON.parse(data) };
    }
  }
}

async function sendMessage(text) {
  if (!current.app || current.running) return;
  setRunning(true);
  ui.messages.querySelectorAll(".msg.hint").forEach((el) => el.remove());
  addMessage("user", text);
  let bubble = null;
  let answered = false;
  const body = { input: text };
  if (current.sessionId) body.session_id = current.sessionId;
  try {
    const r = await fetch(apiUrl(current.app.runs_url), {
      method: "POST",
      headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify(body),
    });
    if (r.status === 401) showKeyForm();
    if (!r.ok) {
      let problem = {};
      try { problem = await r.json(); } catch (e) { problem = { detail: r.statusText }; }
      throw new ApiError(r.status, problem);
    }
    for await (const { event, data } of readSSE(r)) {
      if (event === "run_started") {
        if (current.sessionId !== data.session_id) {
          current.sessionId = data.session_id;
          lastState = null;
          await loadSessions(data.session_id);
        }
      } else if (event === "content_delta") {
        const who = data.member_of ? data.agent_name : null;
        if (!bubble || bubble.dataset.member !== (who || "")) {
          bubble = addMessage(who ? "member" : "assistant", "");
          bubble.dataset.member = who || "";
          if (who) bubble.dataset.label = `${who} (member of ${data.member_of})`;
        }
        bubble.textContent += data.content;
        if (!who) answered = true;
        ui.messages.scrollTop = ui.messages.scrollHeight;
      } else if (event === "tool_call_started") {
        const who = data.member_of ? `${data.agent_name}: ` : "";
        addToolLine(`→ ${who}${data.tool_name}(${JSON.stringify(data.arguments)})`, data.member_of);
        bubble = null;
      } else if (event === "tool_call_completed") {
        const who = data.member_of ? `${data.agent_name}: ` : "";
        addToolLine(`← ${who}${data.tool_name}: ${data.result}`, data.member_of);
      } else if (event === "step_started") {
        addStepLine(`▶ step ${data.step_name}`, "step-started");
        bubble = null;
      } else if (event === "step_completed") {
        const out = data.content === null || data.content === undefined ? "" : `: ${fmtValue(data.content)}`;
        addStepLine(`✓ step ${data.step_name}${out}`, "step-completed");
        bubble = null;
      } else if (event === "state_changed") {
        await refreshState();
      } else if (event === "run_completed" && data.output.status === "paused") {
        const names = data.output.pending_tool_calls.map((p) => p.tool_name).join(", ");
        addToolLine(`⏸ waiting for approval: ${names}`);
      } else if (event === "run_completed") {
        const out = data.output;
        if (!answered && out.content !== null && out.content !== undefined) {
          addMessage("assistant", typeof out.content === "string" ? out.content : JSON.stringify(out.content));
        }
      } else if (event === "error") {
        addMessage("error", data.detail || "the run failed");
      }
    }
  } catch (err) {
    addMessage("error", err.message);
  } finally {
    setRunning(false);
    // Keep the transcript as it streamed (steps, members' work); a reload shows the runs.
    if (current.sessionId) await loadSession(current.sessionId, { keepSelection: true, keepChat: true });
  }
}

function setRunning(running) {
  current.running = running;
  ui.send.disabled = running;
  ui.live.classList.toggle("hidden", !running);
  document.body.dataset.running = running ? "1" : "";
}

// ---- timeline and diffs -------------------------------------------------------------------

function fmtTime(ts) {
  return ts ? new Date(ts * 1000).toLocaleTimeString() : "";
}

async function renderTimeline() {
  ui.timeline.replaceChildren();
  let eventsByRun = new Map();
  if (ui.showEvents.checked && current.sessionId) {
    const body = await api(`/v1/sessions/${encodeURIComponent(current.sessionId)}/events?limit=1000`);
    for (const e of body.events) {
      const key = e.run_id || "";
      if (!eventsByRun.has(key)) eventsByRun.set(key, []);
      eventsByRun.get(key).push(e);
    }
  }
  current.runs.forEach((run, i) => {
    const li = document.createElement("li");
    li.dataset.runId = run.run_id;
    li.dataset.testid = "run";
    li.setAttribute("data-testid", "run");
    li.classList.toggle("selected", current.selectedRun === run.run_id);
    const head = document.createElement("div");
    head.className = "run-head";
    const n = document.createElement("span");
    n.className = "muted";
    n.textContent = `#${i + 1}`;
    const input = document.createElement("span");
    input.className = "run-input";
    input.textContent = run.input || "(no input)";
    const status = document.createElement("span");
    status.className = `status ${run.status}`;
    status.textContent = run.status;
    const time = document.createElement("span");
    time.className = "muted";
    time.textContent = fmtTime(run.created_at);
    head.append(n, input, status, time);
    li.appendChild(head);
    li.addEventListener("click", () => selectRun(run.run_id));
    ui.timeline.appendChild(li);
    for (const e of eventsByRun.get(run.run_id) || []) ui.timeline.appendChild(eventItem(e));
  });
  for (const e of eventsByRun.get("") || []) ui.timeline.appendChild(eventItem(e));
  if (!current.runs.length) {
    const li = document.createElement("li");
    li.className = "event";
    li.textContent = current.sessionId ? "no runs yet" : "send a message to start a session";
    ui.timeline.appendChild(li);
  }
}

function block(label, text, testid) {
  const wrap = document.createElement("div");
  wrap.className = "event-block";
  const head = document.createElement("div");
  head.className = "event-label";
  head.textContent = label;
  const pre = document.createElement("pre");
  pre.textContent = typeof text === "string" ? text : JSON.stringify(text, null, 2);
  if (testid) pre.setAttribute("data-testid", testid);
  wrap.append(head, pre);
  return wrap;
}

// The body of an expanded event: what the model was sent and answered, a tool's
// arguments and result, a step's output.
function eventBody(e) {
  const d = e.data || {};
  const parts = [];
  if (e.type === "model_response") {
    const req = d.request || {};
    if (req.system !== undefined) parts.push(block("system prompt (as rendered)", req.system ?? "(none)", "event-system-prompt"));
    if (req.new_messages) {
      parts.push(block(`messages (${req.message_count} sent; new since the last answer)`,
        req.new_messages.map((m) => `${m.role}${m.name ? " " + m.name : ""}: ${m.content ?? ""}`).join("\n") || "(none)",
        "event-messages"));
    }
    const msg = d.message || {};
    const calls = (msg.tool_calls || []).map((c) => `${c.name}(${JSON.stringify(c.arguments)})`);
    parts.push(block("response", [msg.content || "", ...calls.map((c) => `→ ${c}`)].filter(Boolean).join("\n") || "(empty)", "event-response"));
    if (d.usage) parts.push(block("usage", d.usage));
  } else if (e.type === "tool_call") {
    parts.push(block("arguments", d.arguments ?? {}, "event-arguments"));
    parts.push(block(d.is_error ? "result (error)" : "result", d.result ?? "", "event-result"));
  } else if (e.type === "step_completed") {
    parts.push(block("output", (d.output || {}).content ?? null, "event-output"));
  } else {
    parts.push(block("data", d));
  }
  return parts;
}

function eventItem(e) {
  const li = document.createElement("li");
  li.className = "event";
  li.setAttribute("data-testid", "event");
  li.dataset.type = e.type;
  let summary = "";
  if (e.type === "state_delta") {
    summary = (e.data.segments || []).map((s) => `${s.source}: ${s.ops.length} op${s.ops.length === 1 ? "" : "s"}`).join(", ");
  } else if (e.type === "tool_call") summary = `${e.data.agent ? e.data.agent + ": " : ""}${e.data.name || ""}`;
  else if (e.type === "model_response") summary = `${e.data.agent || ""} step ${e.data.step ?? ""}`;
  else if (e.type === "step_completed") summary = e.data.name || "";
  else if (e.type === "rollback") summary = `to v${e.data.to_version}`;
  const details = document.createElement("details");
  const head = document.createElement("summary");
  head.textContent = `${e.seq} ${e.type}${summary ? " · " + summary : ""}`;
  details.appendChild(head);
  details.addEventListener("toggle", () => {
    if (details.open && details.children.length === 1) details.append(...eventBody(e));
  });
  li.appendChild(details);
  return li;
}

// A run's structure from its events: a workflow's steps (each with its tool calls and
// output), a team's members (each with its tool calls).
function renderRunStructure(run, events) {
  const box = $("run-structure");
  box.replaceChildren();
  const steps = [];
  let calls = [];
  for (const e of events) {
    if (e.type === "tool_call") calls.push(e.data);
    else if (e.type === "step_completed") {
      steps.push({ name: e.data.name, output: (e.data.output || {}).content, calls });
      calls = [];
    }
  }
  if (steps.length) {
    const h = document.createElement("h3");
    h.textContent = "Steps";
    box.appendChild(h);
    for (const s of steps) {
      const d = document.createElement("details");
      d.className = "run-step";
      d.setAttribute("data-testid", "run-step");
      d.open = true;
      const sum = document.createElement("summary");
      sum.textContent = `${s.name} · ${s.calls.length} tool call${s.calls.length === 1 ? "" : "s"}`;
      d.appendChild(sum);
      for (const c of s.calls) {
        const line = document.createElement("div");
        line.className = "tool";
        line.setAttribute("data-testid", "run-step-tool");
        line.textContent = `${c.agent ? c.agent + ": " : ""}${c.name}(${JSON.stringify(c.arguments)}) → ${c.result}`;
        d.appendChild(line);
      }
      const out = document.createElement("div");
      out.className = "step-output";
      out.setAttribute("data-testid", "run-step-output");
      out.textContent = `output: ${s.output === null || s.output === undefined ? "(none)" : typeof s.output === "string" ? s.output : JSON.stringify(s.output)}`;
      d.appendChild(out);
      box.appendChild(d);
    }
    return;
  }
  const members = new Map();
  for (const e of events) {
    const agent = (e.data || {}).agent;
    if (!agent || agent === run.agent_name) continue;
    if (!members.has(agent)) members.set(agent, []);
    if (e.type === "tool_call") members.get(agent).push(e.data);
  }
  if (members.size) {
    const h = document.createElement("h3");
    h.textContent = "Members";
    box.appendChild(h);
    for (const [name, memberCalls] of members) {
      const d = document.createElement("details");
      d.className = "run-member";
      d.setAttribute("data-testid", "run-member");
      d.open = true;
      const sum = document.createElement("summary");
      sum.textContent = `${name} · ${memberCalls.length} tool call${memberCalls.length === 1 ? "" : "s"}`;
      d.appendChild(sum);
      for (const c of memberCalls) {
        const line = document.createElement("div");
        line.className = "tool";
        line.textContent = `${c.name}(${JSON.stringify(c.arguments)}) → ${c.result}`;
        d.appendChild(line);
      }
      box.appendChild(d);
    }
  }
}

function fmtPath(path) {
  return path.map((p, i) => (typeof p === "number" ? `[${p}]` : i === 0 ? p : `.${p}`)).join("");
}

function fmtValue(v) {
  const s = JSON.stringify(v);
  return s && s.length > 120 ? s.slice(0, 117) + "…" : s;
}

async function selectRun(runId) {
  current.selectedRun = runId;
  ui.timeline.querySelectorAll("li[data-run-id]").forEach((li) => li.classList.toggle("selected", li.dataset.runId === runId));
  const run = current.runs.find((r) => r.run_id === runId);
  const sid = encodeURIComponent(current.sessionId);
  const body = await api(`/v1/sessions/${sid}/diff?run=${encodeURIComponent(runId)}`);
  const runEvents = await api(`/v1/sessions/${sid}/events?limit=1000&run_id=${encodeURIComponent(runId)}`);
  renderRunStructure(run || {}, runEvents.events);
  ui.detail.classList.remove("hidden");
  ui.detail.dataset.from = body.from ?? "";
  ui.detail.dataset.to = body.to ?? "";
  ui.runTitle.textContent = `State diff of “${run ? run.input : runId}”` +
    (body.from !== null ? ` (v${body.from} → v${body.to})` : "");
  ui.diff.replaceChildren();
  if (!body.changes.length) {
    const none = document.createElement("div");
    none.className = "muted";
    none.textContent = "This run did not change the session's state.";
    ui.diff.appendChild(none);
  }
  for (const c of body.changes) {
    const div = document.createElement("div");
    div.className = `change ${c.kind}`;
    div.setAttribute("data-testid", `diff-${c.kind}`);
    const sign = document.createElement("span");
    sign.className = "sign";
    sign.textContent = c.kind === "added" ? "+" : c.kind === "removed" ? "−" : "~";
    const path = document.createElement("span");
    path.className = "path";
    path.textContent = fmtPath(c.path);
    div.append(sign, path);
    const text = c.kind === "added" ? ` = ${fmtValue(c.after)}`
      : c.kind === "removed" ? ` (was ${fmtValue(c.before)})`
      : `: ${fmtValue(c.before)} → ${fmtValue(c.after)}`;
    div.append(document.createTextNode(text));
    ui.diff.appendChild(div);
  }
  const hasVersions = body.from !== null;
  $("rollback-before").disabled = !hasVersions;
  $("rollback-after").disabled = !hasVersions;
}

async function rollback(to) {
  if (!window.confirm(`Roll the state back to version ${to}? This adds a new version; the history is kept.`)) return;
  const sid = encodeURIComponent(current.sessionId);
  const body = await api(`/v1/sessions/${sid}/rollback`, { method: "POST", body: { to } });
  renderState(body.state, body.version);
  toast(`Rolled back to v${to} (as new version v${body.version})`, true);
  await loadSession(current.sessionId, { keepSelection: true });
}

async function fork() {
  const sid = encodeURIComponent(current.sessionId);
  const body = await api(`/v1/sessions/${sid}/fork`, { method: "POST", body: { at: current.selectedRun } });
  await loadSessions(body.session_id);
  await loadSession(body.session_id);
  toast(`Forked into session ${body.session_id}`, true);
}

// ---- sessions ------------------------------------------------------------------------------

async function loadSessions(select) {
  const params = new URLSearchParams({ limit: "100" });
  if (current.app && current.app.app_name) params.set("app", current.app.app_name);
  const body = await api(`/v1/sessions?${params}`);
  ui.session.replaceChildren();
  const fresh = new Option("— new session —", NEW);
  ui.session.appendChild(fresh);
  for (const s of body.sessions) {
    const label = `${s.session_id}${s.user_id ? " · " + s.user_id : ""}`;
    ui.session.appendChild(new Option(label, s.session_id));
  }
  if (select && ![...ui.session.options].some((o) => o.value === select)) {
    ui.session.appendChild(new Option(select, select));
  }
  ui.session.value = select || NEW;
}

async function loadSession(sessionId, opts = {}) {
  current.sessionId = sessionId || null;
  if (!opts.keepSelection) { current.selectedRun = null; ui.detail.classList.add("hidden"); }
  ui.sessionLabel.textContent = sessionId ? sessionId : "(new session)";
  if (!sessionId) {
    current.runs = [];
    lastState = null;
    ui.messages.replaceChildren();
    renderState({}, null);
    await renderTimeline();
    await renderApprovals(null);
    const hint = addMessage("assistant", `Say something to ${current.app ? current.app.name : "the agent"} to start a new session.`);
    hint.classList.add("muted", "hint");
    return;
  }
  const body = await api(`/v1/sessions/${encodeURIComponent(sessionId)}`);
  current.runs = body.runs;
  await showForkOrigin(sessionId);
  if (!opts.keepSelection) lastState = null;
  if (!current.running && !opts.keepChat) renderChat(body.runs);
  renderState(body.state, body.version);
  await renderTimeline();
  await renderApprovals(sessionId);
  if (opts.keepSelection && current.selectedRun) await selectRun(current.selectedRun);
}

async function showForkOrigin(sessionId) {
  const banner = $("fork-banner");
  banner.replaceChildren();
  banner.classList.add("hidden");
  if (!sessionId) return;
  const first = await api(`/v1/sessions/${encodeURIComponent(sessionId)}/events?limit=3`);
  const forked = first.events.find((e) => e.type === "forked");
  if (!forked || current.sessionId !== sessionId) return;
  const from = forked.data.from_session;
  const link = document.createElement("a");
  link.href = `?session=${encodeURIComponent(from)}`;
  link.textContent = from;
  link.setAttribute("data-testid", "fork-origin");
  link.addEventListener("click", guard(async (ev) => {
    ev.preventDefault();
    await loadSessions(from);
    await loadSession(from);
  }));
  const version = forked.data.version ?? forked.data.at;
  banner.append("forked from ", link, ` at version ${version}`);
  banner.classList.remove("hidden");
}

async function selectApp(index) {
  current.app = apps[index] || null;
  const params = new URLSearchParams(location.search);
  await loadSessions(null);
  const wanted = params.get("session");
  if (wanted && [...ui.session.options].some((o) => o.value === wanted)) {
    ui.session.value = wanted;
    await loadSession(wanted);
  } else {
    await loadSession(null);
  }
}

async function start() {
  try {
    const me = await api("/v1/me");
    ui.whoami.textContent = me.user_id ? `${me.user_id}${me.admin ? " (admin)" : ""}` : "no auth (local)";
    ui.keyForm.classList.add("hidden");
    apps = (await api("/v1/apps")).apps;
  } catch (err) {
    if (err.status === 401) { ui.whoami.textContent = "API key needed"; return; }
    toast(err.message);
    return;
  }
  ui.app.replaceChildren(...apps.map((a, i) => new Option(`${a.name} (${a.kind.replace(/s$/, "")})`, String(i))));
  const wanted = new URLSearchParams(location.search).get("app");
  const index = Math.max(0, apps.findIndex((a) => a.name === wanted));
  ui.app.value = String(index);
  await selectApp(index);
}

// ---- wiring --------------------------------------------------------------------------------

function guard(fn) {
  return async (...args) => {
    try { await fn(...args); } catch (err) { toast(err.message); }
  };
}

ui.form.addEventListener("submit", guard(async (ev) => {
  ev.preventDefault();
  const text = ui.input.value.trim();
  if (!text) return;
  ui.input.value = "";
  await sendMessage(text);
}));
ui.input.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); ui.form.requestSubmit(); }
});
ui.app.addEventListener("change", guard(() => selectApp(Number(ui.app.value))));
ui.session.addEventListener("change", guard(() => loadSession(ui.session.value || null)));
ui.newSession.addEventListener("click", guard(async () => { ui.session.value = NEW; await loadSession(null); ui.input.focus(); }));
ui.showEvents.addEventListener("change", guard(renderTimeline));
$("rollback-before").addEventListener("click", guard(() => rollback(Number(ui.detail.dataset.from))));
$("rollback-after").addEventListener("click", guard(() => rollback(Number(ui.detail.dataset.to))));
$("fork").addEventListener("click", guard(fork));
$("expand-all").addEventListener("click", () => ui.tree.querySelectorAll("details").forEach((d) => { d.open = true; }));
$("collapse-all").addEventListener("click", () => ui.tree.querySelectorAll("details").forEach((d) => { d.open = false; }));
ui.keyForm.addEventListener("submit", guard(async (ev) => {
  ev.preventDefault();
  localStorage.setItem("statewise.key", ui.keyInput.value.trim());
  ui.keyInput.value = "";
  await start();
}));

start();

// ---- runs paused for approval -------------------------------------------------------------

// Each paused run lists the tool calls it waits on; a person approves, rejects (with a
// reason the model sees) or edits each one. When every call of a run has an answer, the
// run is continued (POST .../continue); a run someone else continued first answers 409.
async function renderApprovals(sessionId) {
  const box = $("approvals");
  box.replaceChildren();
  if (!sessionId) { box.classList.add("hidden"); return; }
  let body;
  try {
    body = await api(`/v1/sessions/${encodeURIComponent(sessionId)}/paused-runs`);
  } catch (err) {
    box.classList.add("hidden");
    return;
  }
  box.classList.toggle("hidden", body.runs.length === 0);
  if (body.runs.length === 0) return;
  const title = document.createElement("h3");
  title.textContent = "Waiting for approval";
  box.appendChild(title);
  for (const run of body.runs) {
    const answers = {};
    for (const call of run.pending_tool_calls) {
      box.appendChild(approvalCard(sessionId, run, call, answers));
    }
  }
}

function approvalCard(sessionId, run, call, answers) {
  const card = document.createElement("div");
  card.className = "approval";
  card.dataset.testid = "approval";
  card.dataset.toolCallId = call.tool_call_id;
  const what = document.createElement("div");
  what.className = "call";
  what.textContent = `${call.tool_name}(${JSON.stringify(call.arguments)})`;
  card.appendChild(what);
  if (call.reason) {
    const why = document.createElement("div");
    why.className = "why";
    why.textContent = call.reason;
    card.appendChild(why);
  }
  const row = document.createElement("div");
  row.className = "row";
  const button = (label, testid, onClick) => {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "small";
    b.textContent = label;
    b.dataset.testid = testid;
    b.addEventListener("click", guard(onClick));
    row.appendChild(b);
    return b;
  };
  const extra = document.createElement("div");
  extra.className = "row";
  const decide = async (answer, label) => {
    answers[call.tool_call_id] = answer;
    row.replaceChildren();
    extra.replaceChildren();
    const done = document.createElement("span");
    done.className = "decided";
    done.textContent = label;
    row.appendChild(done);
    const missing = run.pending_tool_calls.filter((c) => !(c.tool_call_id in answers));
    if (missing.length === 0) await continueRun(sessionId, run.run_id, answers);
  };
  if (call.kind === "client") {
    const note = document.createElement("span");
    note.className = "why";
    note.textContent = "runs in the client that started the run";
    row.appendChild(note);
  } else {
    button("Approve", "approve", () => decide({ approved: true }, "approved"));
  }
  button("Reject", "reject", () => {
    extra.replaceChildren();
    const reason = document.createElement("input");
    reason.placeholder = "Why? (the model sees this)";
    reason.dataset.testid = "reject-reason";
    const ok = document.createElement("button");
    ok.type = "button";
    ok.className = "small";
    ok.textContent = "Reject";
    ok.dataset.testid = "confirm-reject";
    ok.addEventListener("click", guard(() => decide({ approved: false, reason: reason.value || null }, "rejected")));
    extra.append(reason, ok);
    reason.focus();
  });
  if (call.kind !== "client") {
    button("Edit", "edit", () => {
      extra.replaceChildren();
      const args = document.createElement("textarea");
      args.rows = 3;
      args.value = JSON.stringify(call.arguments, null, 2);
      args.dataset.testid = "edit-arguments";
      const ok = document.createElement("button");
      ok.type = "button";
      ok.className = "small";
      ok.textContent = "Approve with these arguments";
      ok.dataset.testid = "confirm-edit";
      ok.addEventListener("click", guard(async () => {
        let parsed;
        try { parsed = JSON.parse(args.value); } catch (e) { toast(`The arguments are not JSON: ${e.message}`); return; }
        if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) { toast("The arguments must be a JSON object"); return; }
        await decide({ approved: true, arguments: parsed }, "approved (edited)");
      }));
      extra.append(args, ok);
      args.focus();
    });
  }
  card.append(row, extra);
  return card;
}

async function continueRun(sessionId, runId, answers) {
  setRunning(true);
  try {
    const out = await api(
      `/v1/sessions/${encodeURIComponent(sessionId)}/runs/${encodeURIComponent(runId)}/continue`,
      { method: "POST", body: { approvals: answers } },
    );
    if (out.status === "paused") toast("The run continued and is waiting for approval again", true);
    else toast("Run continued", true);
  } catch (err) {
    toast(err.status === 409 ? `Already continued: ${err.message}` : err.message);
  } finally {
    setRunning(false);
    await loadSession(sessionId, { keepSelection: true });
  }
}
