// Haul's dashboard: everything it shows comes from the daemon's /v1 API, kept live by the
// daemon's event stream (/v1/events). No framework, no build step.
"use strict";

const GRAPH_SECONDS = 300;
// Downloads are loaded a page at a time, in queue order: a queue of a million opens as
// quickly as one of ten, and "Show more" loads the next page.
const PAGE = 200;
const ENDED = new Set(["completed", "failed", "cancelled"]);
const tasks = new Map(); // id → task, as /v1/tasks gives it, plus live progress
const live = new Map(); // id → {bytesPerSecond, etaSeconds, received, total}
const speeds = []; // overall bytes per second, one sample a second, oldest first
let events = null; // the live event stream's AbortController
let refreshing = null;
let pagesWanted = 1; // pages of downloads the user asked to see
let more = false; // whether the daemon has downloads past those loaded
// Reads are numbered as they start. A task read on its own (refreshTask) after a whole list
// was asked for is newer than that list: readAt keeps, per task, the number of the read that
// gave what is shown (null: the task was gone), so a slower list cannot put back what a task
// was before — a finished download shown running until the next refresh.
let reads = 0;
let listRead = 0; // the number of the list read shown
const readAt = new Map(); // id → {read, task} of the newest single read applied since
const SESSION_KEY = "haul.session";

const $ = (id) => document.getElementById(id);

// MARK: The API

class APIError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// The session is a header the page adds itself, never a cookie: a browser sends cookies on
// its own to every port of this host; a header only where this page's script puts it.
function authorised(headers) {
  const session = sessionStorage.getItem(SESSION_KEY);
  if (session) headers["X-Haul-Session"] = session;
  return headers;
}

// A link from `haul ui` carries a one-time code in its fragment (never sent to a server):
// spend it for a session kept in this tab, and take it out of the address bar and history.
async function logIn() {
  const match = /^#login=([0-9a-f]{1,128})$/.exec(window.location.hash);
  if (!match) return;
  history.replaceState(null, "", window.location.pathname);
  const response = await fetch("/login", {
    method: "POST",
    headers: { "Content-Type": "application/json", "Accept": "application/json" },
    body: JSON.stringify({ code: match[1] }),
    credentials: "omit",
  });
  const value = await response.json().catch(() => null);
  if (response.ok && value && value.session) {
    sessionStorage.setItem(SESSION_KEY, value.session);
  } else {
    sessionStorage.removeItem(SESSION_KEY);
    $("login-expired").hidden = false;
  }
}

async function api(method, path, body) {
  const options = { method, headers: authorised({ "Accept": "application/json" }), credentials: "omit" };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch("/v1" + path, options);
  const text = await response.text();
  let value = null;
  try { value = text ? JSON.parse(text) : null; } catch { value = null; }
  if (!response.ok) {
    if (response.status === 401) showLogin();
    throw new APIError(response.status, (value && value.error) || `The daemon answered ${response.status}`);
  }
  return value;
}

function showLogin() {
  $("login").hidden = false;
  $("app").hidden = true;
  setLive(false, "Not logged in");
  if (events) { events.abort(); events = null; }
}

function say(text, kind) {
  const box = $("message");
  box.textContent = text;
  box.className = "message" + (kind === "info" ? " info" : "");
  box.hidden = !text;
}

async function attempt(action) {
  try {
    await action();
  } catch (error) {
    if (!(error instanceof APIError && error.status === 401)) say(error.message || String(error));
  }
}

// MARK: Formatting

function bytes(n) {
  if (n === undefined || n === null) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return (unit === 0 ? value.toFixed(0) : value.toFixed(value < 10 ? 2 : 1)) + " " + units[unit];
}

const speed = (n) => bytes(Math.max(0, Math.round(n || 0))) + "/s";

function duration(seconds) {
  if (seconds === undefined || seconds === null || !isFinite(seconds)) return "";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}

function fileName(task) {
  if (task.path) return task.path.split("/").pop();
  try {
    const last = new URL(task.url).pathname.split("/").filter(Boolean).pop();
    return last ? decodeURIComponent(last) : task.url;
  } catch { return task.url; }
}

function stateLabel(state) {
  return state === "waitingForNetwork" ? "offline" : state;
}

// MARK: Rendering

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function render() {
  const sessions = new Map();
  for (const task of tasks.values()) {
    if (!sessions.has(task.session)) sessions.set(task.session, []);
    sessions.get(task.session).push(task);
  }
  const container = $("sessions");
  const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.key : null;
  container.replaceChildren();
  for (const name of [...sessions.keys()].sort()) {
    const section = element("section", "session");
    section.setAttribute("aria-label", "Session " + name);
    const list = sessions.get(name);
    section.append(element("h3", "", `${name} · ${list.length} ${list.length === 1 ? "download" : "downloads"}`));
    const ul = element("ul", "task-list");
    // The unfinished first (in queue order), then the finished.
    const shown = list.filter((t) => !ENDED.has(t.state)).concat(list.filter((t) => ENDED.has(t.state)));
    for (const task of shown) ul.append(renderTask(task));
    section.append(ul);
    container.append(section);
  }
  $("empty").hidden = tasks.size > 0;
  $("more-tasks").hidden = !more;
  $("more-note").hidden = !more;
  $("more-note").textContent = more
    ? `Showing the first ${tasks.size} downloads in queue order; the rest with Show more, or haul list --limit and --after.`
    : "";
  refocus(container, focused);
}

// Keeps the keyboard where it was across a redraw: the control with the same key.
function refocus(within, key) {
  if (!key) return;
  const again = within.querySelector(`[data-key="${CSS.escape(key)}"]`);
  if (again) again.focus();
}

function renderTask(task) {
  const item = element("li", "task");
  item.dataset.id = task.id;
  item.dataset.state = task.state;
  const name = fileName(task);
  const top = element("div", "task-top");
  top.append(element("span", "task-name", name));
  top.append(element("span", "state state-" + task.state, stateLabel(task.state)));
  item.append(top);

  const progress = live.get(task.id) || {};
  const total = progress.total ?? task.totalBytes;
  let received = task.state === "completed" ? (total ?? task.bytesCommitted) : Math.max(progress.received ?? 0, task.bytesCommitted);
  const bar = element("progress");
  bar.max = 100;
  const percent = total ? Math.min(100, Math.floor((received / total) * 100)) : (task.state === "completed" ? 100 : 0);
  // Moving without a value (indeterminate) only while bytes arrive of a size not known yet:
  // a queued, paused, retrying or failed task shows where it stands, still.
  if (task.state === "running" && !total) bar.removeAttribute("value"); else bar.value = percent;
  bar.setAttribute("aria-label", `${name}: ${total ? percent + " %" : bytes(received)}`);
  bar.dataset.percent = String(percent);
  item.append(bar);

  const facts = element("p", "task-facts");
  facts.append(element("span", "task-bytes", total ? `${bytes(received)} of ${bytes(total)} (${percent} %)` : bytes(received)));
  if (task.state === "running") {
    facts.append(element("span", "task-speed", speed(progress.bytesPerSecond)));
    if (progress.etaSeconds !== undefined && progress.etaSeconds !== null) {
      facts.append(element("span", "task-eta", duration(progress.etaSeconds) + " left"));
    }
  }
  if (task.rateLimit) facts.append(element("span", "", "limit " + speed(task.rateLimit)));
  if (task.node) facts.append(element("span", "task-node", "on " + task.node));
  if (task.state === "retrying" && task.nextTryAt) {
    facts.append(element("span", "", "next try " + new Date(task.nextTryAt).toLocaleTimeString()));
  }
  item.append(facts);

  const sources = task.sources && task.sources.length ? task.sources.map((s) => s.url + (s.dropped ? ` (dropped: ${s.dropped})` : "")) : [task.url];
  item.append(element("p", "task-source", sources.join(" · ")));
  // A failure for good in red; a task that tries again by itself says what its last try met.
  if (task.errorMessage && task.state === "failed") item.append(element("p", "task-error", task.errorMessage));
  if (task.errorMessage && task.state === "retrying") item.append(element("p", "task-note", "Last try: " + task.errorMessage));

  const actions = element("div", "task-actions");
  actions.setAttribute("role", "group");
  actions.setAttribute("aria-label", "Actions for " + name);
  const add = (operation, label, applies) => {
    if (!applies) return;
    const button = element("button", "", label);
    button.type = "button";
    button.dataset.operation = operation;
    button.dataset.key = task.id + ":" + operation;
    button.setAttribute("aria-label", `${label} ${name}`);
    button.addEventListener("click", () => attempt(() => operate(operation, { ids: [task.id] })));
    actions.append(button);
  };
  add("pause", "Pause", task.state === "queued" || task.state === "running" || task.state === "retrying" || task.state === "waitingForNetwork");
  add("resume", "Resume", task.state === "paused" || task.state === "failed");
  add("cancel", "Cancel", !ENDED.has(task.state));
  add("remove", "Remove", true);
  item.append(actions);
  return item;
}

function renderSummary(status) {
  $("speed-now").textContent = speed(status.bytesPerSecond);
  $("counts").textContent = `${status.running} running · ${status.waiting} waiting`;
  renderFleet(status.fleet);
}

// MARK: The fleet

// Each node as `haul status` shows it: its state, its downloads of its own limit, its own
// rate limit, its heartbeat and speed, and a Drain button while it runs.
function renderFleet(fleet) {
  $("fleet").hidden = !fleet;
  if (!fleet) return;
  $("limits-title").textContent = `Limits of this node (${fleet.node})`;
  const caps = fleet.caps || {};
  const parts = [];
  if (caps.maxConcurrentDownloads) parts.push(`${caps.maxConcurrentDownloads} downloads`);
  if (caps.maxDownloadsPerHost) parts.push(`${caps.maxDownloadsPerHost} per host`);
  if (caps.overallRateLimit) parts.push(speed(caps.overallRateLimit));
  $("fleet-caps").textContent = "Caps over all nodes: " + (parts.length ? parts.join(", ") : "none");
  const now = Date.now();
  const rows = fleet.nodes.map((node) => {
    const silent = Math.max(0, (now - Date.parse(node.heartbeatAt)) / 1000);
    const state = node.stoppedAt ? "left" : silent > fleet.leaseSeconds ? "gone" : node.drainingSince ? "draining" : "running";
    const row = element("tr");
    row.dataset.node = node.name;
    row.dataset.state = state;
    const cells = [
      node.name + (node.name === fleet.node ? " (this)" : ""), state,
      `${node.leases} of ${node.maxConcurrentDownloads ?? "?"}`,
      node.overallRateLimit ? speed(node.overallRateLimit) : "none",
      node.stoppedAt ? "–" : `${Math.round(silent)} s ago`, speed(node.bytesPerSecond),
    ];
    for (const text of cells) row.append(element("td", null, text));
    const actions = element("td");
    if (state === "running") {
      const button = element("button", "drain", "Drain");
      button.type = "button";
      button.setAttribute("aria-label", `Drain node ${node.name}`);
      button.addEventListener("click", () => drainNode(node.name, button));
      actions.append(button);
    }
    row.append(actions);
    return row;
  });
  $("fleet-nodes").replaceChildren(...rows);
}

async function drainNode(name, button) {
  button.disabled = true;
  await attempt(async () => {
    await api("POST", `/fleet/nodes/${encodeURIComponent(name)}/drain`, { finishing: false });
    say(`Node ${name} drains: it takes no new download and hands back those it runs, then stops.`, "info");
  });
  button.disabled = false;
}

// MARK: The speed graph

function drawGraph() {
  const canvas = $("graph");
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 600, height = canvas.clientHeight || 120;
  if (canvas.width !== Math.round(width * ratio)) { canvas.width = Math.round(width * ratio); canvas.height = Math.round(height * ratio); }
  const context = canvas.getContext("2d");
  context.setTransform(ratio, 0, 0, ratio, 0, 0);
  context.clearRect(0, 0, width, height);
  const peak = Math.max(1, ...speeds);
  const style = getComputedStyle(document.documentElement);
  const accent = style.getPropertyValue("--accent").trim() || "#1f6feb";
  const step = width / (GRAPH_SECONDS - 1);
  const x0 = width - (speeds.length - 1) * step;
  context.beginPath();
  speeds.forEach((value, index) => {
    const x = x0 + index * step, y = height - 4 - (value / peak) * (height - 12);
    if (index === 0) context.moveTo(x, y); else context.lineTo(x, y);
  });
  context.strokeStyle = accent;
  context.lineWidth = 2;
  context.stroke();
  if (speeds.length > 1) {
    context.lineTo(width, height);
    context.lineTo(x0, height);
    context.closePath();
    context.globalAlpha = 0.15;
    context.fillStyle = accent;
    context.fill();
    context.globalAlpha = 1;
  }
  $("graph-peak").textContent = "peak " + speed(Math.max(0, ...speeds));
  canvas.setAttribute("aria-label", `Overall speed over the last five minutes: now ${speed(speeds[speeds.length - 1] || 0)}, peak ${speed(Math.max(0, ...speeds))}`);
}

// MARK: Loading and live updates

async function refreshAll() {
  if (refreshing) return refreshing;
  refreshing = (async () => {
    try {
      const started = ++reads;
      const loaded = await loadPages(pagesWanted);
      more = loaded.more;
      const newer = new Map([...readAt].filter(([, one]) => one.read > started));
      readAt.clear();
      for (const [id, one] of newer) readAt.set(id, one);
      tasks.clear();
      for (const task of loaded.list) {
        const one = newer.get(task.id);
        if (!one) tasks.set(task.id, task);
        else if (one.task) tasks.set(task.id, one.task);
      }
      // Added after the list was read, and read since: shown when the list reaches that far.
      if (!more) for (const [id, one] of newer) if (one.task && !tasks.has(id)) tasks.set(id, one.task);
      listRead = started;
      for (const id of [...live.keys()]) if (!tasks.has(id)) live.delete(id);
      render();
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

// The first `count` pages of downloads, each after the last of the one before; from the
// start again when that one was removed meanwhile (the daemon answers 404).
async function loadPages(count) {
  for (let attempt = 0; ; attempt++) {
    const list = [];
    let after = null;
    try {
      for (let page = 0; page < count; page++) {
        const chunk = await api("GET", "/tasks?limit=" + PAGE + (after ? "&after=" + encodeURIComponent(after) : ""));
        list.push(...chunk);
        if (chunk.length < PAGE) return { list, more: false };
        after = chunk[chunk.length - 1].id;
      }
      return { list, more: true };
    } catch (error) {
      if (!(error instanceof APIError && error.status === 404) || attempt >= 2) throw error;
    }
  }
}

async function showMore() {
  pagesWanted += 1;
  await refreshAll();
}

const pending = new Set();
let pendingTimer = null;
function refreshTask(id) {
  pending.add(id);
  if (pendingTimer) return;
  pendingTimer = setTimeout(async () => {
    const ids = [...pending];
    pending.clear();
    pendingTimer = null;
    for (const one of ids) {
      const read = ++reads;
      // Two batches can overlap (the timer is free again as a batch starts): the later read wins.
      const isNewest = () => Math.max(readAt.get(one)?.read ?? 0, listRead) < read;
      try {
        const task = await api("GET", "/tasks/" + one);
        if (!isNewest()) continue;
        tasks.set(one, task);
        readAt.set(one, { read, task });
      } catch (error) {
        if (error instanceof APIError && error.status === 404 && isNewest()) {
          tasks.delete(one);
          live.delete(one);
          readAt.set(one, { read, task: null });
        }
      }
    }
    render();
  }, 100);
}

function setLive(on, text) {
  const node = $("live");
  node.textContent = text;
  node.className = "live " + (on ? "on" : "off");
}

// The daemon's event stream (server-sent events) read with fetch, since EventSource cannot
// send the session header; after a break it reconnects with Last-Event-ID, so nothing is missed.
// Returns a promise of its first connection's outcome (connected, refused or failed).
function listen() {
  if (events) events.abort();
  const controller = new AbortController();
  events = controller;
  let settled;
  const first = new Promise((resolve) => { settled = resolve; });
  const handlers = { progress: onProgress };
  for (const kind of ["added", "state", "resumed", "completed", "failed"]) handlers[kind] = onChange;
  let lastId = null;
  (async () => {
    while (!controller.signal.aborted) {
      try {
        const headers = authorised({ "Accept": "text/event-stream" });
        if (lastId !== null) headers["Last-Event-ID"] = lastId;
        const response = await fetch("/v1/events", { headers, credentials: "omit", signal: controller.signal });
        if (response.status === 401) { showLogin(); settled(); return; }
        if (!response.ok || !response.body) throw new Error(`The daemon answered ${response.status}`);
        setLive(true, "Live");
        settled();
        attempt(refreshAll);
        lastId = await readEvents(response.body, handlers, lastId);
      } catch (error) {
        settled();
        if (controller.signal.aborted) return;
      }
      setLive(false, "Reconnecting…");
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
  })();
  return first;
}

// Reads server-sent events until the stream ends; returns the last event's id.
async function readEvents(body, handlers, lastId) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let message = { event: "message", data: [], id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return lastId;
    buffer += value;
    let end;
    while ((end = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + (buffer.startsWith("\r\n", end) ? 2 : 1));
      if (line === "") {
        if (message.id !== null) lastId = message.id;
        const handler = handlers[message.event];
        if (handler && message.data.length) handler(message.data.join("\n"));
        message = { event: "message", data: [], id: null };
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") message.event = text;
      else if (field === "data") message.data.push(text);
      else if (field === "id") message.id = text;
    }
  }
}

function onProgress(data) {
  const record = JSON.parse(data);
  live.set(record.id, { received: record.received, total: record.total, bytesPerSecond: record.bytesPerSecond, etaSeconds: record.etaSeconds });
  const task = tasks.get(record.id);
  if (!task) { if (!more) refreshTask(record.id); return; } // Past the pages loaded: not shown.
  if (task.state !== "running") { refreshTask(record.id); return; }
  const old = document.querySelector(`li.task[data-id="${CSS.escape(record.id)}"]`);
  if (!old) return; // Not among those shown.
  const focused = old.contains(document.activeElement) ? document.activeElement.dataset.key : null;
  const fresh = renderTask(task);
  old.replaceWith(fresh);
  refocus(fresh, focused);
}

function onChange(data) {
  const record = JSON.parse(data);
  if (record.id && (tasks.has(record.id) || !more)) refreshTask(record.id);
}

async function sample() {
  try {
    const status = await api("GET", "/status");
    speeds.push(status.bytesPerSecond);
    if (speeds.length > GRAPH_SECONDS) speeds.shift();
    renderSummary(status);
    drawGraph();
  } catch (error) {
    if (!(error instanceof APIError)) setLive(false, "The daemon does not answer");
  }
}

// MARK: Actions

async function operate(operation, selector) {
  const changed = await api("POST", "/tasks/" + operation, selector);
  for (const task of changed) {
    if (operation === "remove") { tasks.delete(task.id); live.delete(task.id); } else tasks.set(task.id, task);
  }
  say("");
  render();
}

function numberField(id) {
  const text = $(id).value.trim();
  if (text === "") return undefined;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`${$(id).closest("label").firstChild.textContent.trim()}: give a whole number`);
  return value;
}

async function addDownloads(event) {
  event.preventDefault();
  const urls = $("add-urls").value.split(/\s+/).map((u) => u.trim()).filter(Boolean);
  if (urls.length === 0) { say("Give at least one URL."); return; }
  const name = $("add-name").value.trim();
  if (name && urls.length > 1) { say("A file name fits one URL; leave it empty to add several."); return; }
  const common = { directory: $("add-directory").value.trim() };
  const checksum = $("add-checksum").value.trim();
  if (checksum) common.checksum = checksum;
  const connections = numberField("add-connections");
  if (connections !== undefined) common.connections = connections;
  const limit = numberField("add-limit");
  if (limit) common.rateLimit = limit * 1024;
  const downloads = urls.map((url) => Object.assign({ url }, common, name ? { fileName: name } : {}));
  const added = await api("POST", "/tasks", { downloads });
  for (const task of added) tasks.set(task.id, task);
  render();
  $("add-urls").value = "";
  $("add-name").value = "";
  $("add-checksum").value = "";
  say(added.length === 1 ? "Added 1 download." : `Added ${added.length} downloads.`, "info");
}

async function applyLimits(event) {
  event.preventDefault();
  const change = {};
  const concurrent = numberField("limit-concurrent");
  if (concurrent !== undefined) change.maxConcurrentDownloads = concurrent;
  const perHost = numberField("limit-per-host");
  if (perHost !== undefined) change.maxDownloadsPerHost = perHost;
  const connections = numberField("limit-connections");
  if (connections !== undefined) change.maxConnectionsPerHost = connections;
  const rate = numberField("limit-rate");
  if (rate !== undefined) change.overallRateLimit = rate * 1024;
  showSettings(await api("PUT", "/settings", change));
  say("Limits applied.", "info");
}

function showSettings(settings) {
  if (settings.maxConcurrentDownloads !== undefined) $("limit-concurrent").value = settings.maxConcurrentDownloads;
  if (settings.maxDownloadsPerHost !== undefined) $("limit-per-host").value = settings.maxDownloadsPerHost;
  if (settings.maxConnectionsPerHost !== undefined) $("limit-connections").value = settings.maxConnectionsPerHost;
  $("limit-rate").value = settings.overallRateLimit ? Math.round(settings.overallRateLimit / 1024) : 0;
}

// MARK: Start

async function start() {
  $("add").addEventListener("submit", (event) => attempt(() => addDownloads(event)));
  $("limits").addEventListener("submit", (event) => attempt(() => applyLimits(event)));
  $("pause-all").addEventListener("click", () => attempt(() => operate("pause", { all: true })));
  $("resume-all").addEventListener("click", () => attempt(() => operate("resume", { all: true })));
  $("cancel-all").addEventListener("click", () => attempt(async () => {
    if (window.confirm("Cancel every unfinished download and delete its partial data?")) await operate("cancel", { all: true });
  }));
  $("remove-all").addEventListener("click", () => attempt(async () => {
    if (window.confirm("Remove every download from the list? Unfinished ones are cancelled; finished files stay on disk.")) await operate("remove", { all: true });
  }));
  $("clear-finished").addEventListener("click", () => attempt(async () => {
    const ids = [...tasks.values()].filter((t) => ENDED.has(t.state)).map((t) => t.id);
    if (ids.length) await operate("remove", { ids });
  }));
  $("more-tasks").addEventListener("click", () => attempt(showMore));
  window.addEventListener("resize", drawGraph);
  try {
    await logIn();
  } catch (error) {
    say(error.message || String(error));
  }
  try {
    const status = await api("GET", "/status");
    $("add-directory").value = status.directory || "";
    renderSummary(status);
    showSettings(await api("GET", "/settings"));
  } catch (error) {
    if (!(error instanceof APIError && error.status === 401)) {
      say(error.message || String(error));
      setLive(false, "The daemon does not answer");
    }
    if (error instanceof APIError && error.status === 401) return;
  }
  // Shown once what it shows is true: the live stream connected (or known not to be) and
  // the tasks loaded, so the first paint never says "Connecting…" or "No downloads yet."
  // beside counts of running downloads.
  await listen();
  await attempt(refreshAll);
  $("app").hidden = false;
  drawGraph();
  setInterval(sample, 1000);
  // A reconcile now and then: a task removed by another client sends no event.
  setInterval(() => attempt(refreshAll), 15000);
}

document.addEventListener("DOMContentLoaded", start);
