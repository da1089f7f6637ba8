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

async function refreshFleet() {
  const status = fleetUi.status.value;
  let page;
  try {
    page = await api(`/v1/fleet/runs?limit=100${status ? `&status=${status}` : ""}`);
  } catch (err) {
    if (err.status === 404) return false; // this server has no fleet
    return true; // a key is needed, or the database is away: try again later
  }
  fleetUi.panel.classList.remove("hidden");
  fleetUi.count.textContent = `${page.runs.length}${page.next_offset != null ? "+" : ""}`;
  fleetUi.rows.replaceChildren(...page.runs.map(fleetRow));
  return true;
}

async function fleetLoop() {
  if (await refreshFleet()) setTimeout(fleetLoop, FLEET_REFRESH_MS);
}

fleetUi.status.addEventListener("change", () => { refreshFleet(); });
fleetLoop();
