// Fleet runs panel: shown when the server has a fleet (GET /v1/fleet/runs answers), refreshed
// every two seconds. Uses api() from app.js, so it sends the same API key.
"use strict";

const fleetUi = {
  panel: document.getElementById("fleet-panel"),
  rows: document.getElementById("fleet-runs"),
  count: document.getElementById("fleet-count"),
  status: document.getElementById("fleet-status"),
};
const FLEET_REFRESH_MS = 2000;

function fleetTime(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return d.toLocaleTimeString();
}

function fleetCell(text, className) {
  const td = document.createElement("td");
  if (className) td.className = className;
  td.textContent = text == null ? "" : String(text);
  return td;
}

function fleetRow(run) {
  const tr = document.createElement("tr");
  tr.dataset.runId = run.run_id;
  tr.dataset.status = run.status;
  const status = document.createElement("td");
  const badge = document.createElement("span");
  badge.className = `run-status ${run.status}`;
  badge.textContent = run.status;
  status.append(badge);
  const id = fleetCell(run.run_id.slice(0, 8), "run-id");
  id.title = run.run_id;
  tr.append(
    id, status, fleetCell(run.target), fleetCell(run.session_id), fleetCell(run.user_id),
    fleetCell(run.queue), fleetCell(run.executor, "executor"), fleetCell(fleetTime(run.created_at)),
    fleetCell(fleetTime(run.started_at)), fleetCell(fleetTime(run.finished_at)),
    fleetCell(run.error, "error"),
  );
  return tr;
}

// true: keep following the runs; false: stop (no fleet here, or a key is needed first).
async function refreshFleet() {
  const status = fleetUi.status.value;
  let page;
  try {
    page = await api(`/v1/fleet/runs?limit=100${status ? `&status=${status}` : ""}`);
  } catch (err) {
    // 404: this server has no fleet. 401: wait for the key form (app.js shows it).
    // Anything else (the database is away): try again later.
    return err.status !== 404 && err.status !== 401;
  }
  fleetUi.panel.classList.remove("hidden");
  fleetUi.count.textContent = `${page.runs.length}${page.next_offset != null ? "+" : ""}`;
  fleetUi.rows.replaceChildren(...page.runs.map(fleetRow));
  return true;
}

let fleetTimer = null;

async function fleetLoop() {
  clearTimeout(fleetTimer);
  if (await refreshFleet()) fleetTimer = setTimeout(fleetLoop, FLEET_REFRESH_MS);
}

// Only a server with a fleet has runs to show (the page is told so): no request otherwise.
if (document.body.dataset.fleet === "1") {
  fleetUi.status.addEventListener("change", () => { fleetLoop(); });
  // A key entered in the header's form: follow the runs with it.
  document.getElementById("key-form").addEventListener("submit", () => { setTimeout(fleetLoop, 200); });
  fleetLoop();
}
