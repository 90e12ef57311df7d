// The router's live status page: polls /status.json (same origin only) and
// redraws. No library, no request to anything but this router.
"use strict";
const POLL_MS = 250;
let last = null; // { at: ms, counters, drops }

const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
};
const fmt = (n) => (n === undefined || n === null) ? "–" : Number(n).toLocaleString("en");
const bytes = (n) => {
  if (n === undefined || n === null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, x = Number(n);
  while (x >= 1024 && i < u.length - 1) { x /= 1024; i++; }
  return (i ? x.toFixed(1) : x) + " " + u[i];
};
const ago = (ms) => ms === undefined || ms === null ? "–" :
  ms < 1000 ? ms + " ms ago" : ms < 120000 ? (ms / 1000).toFixed(1) + " s ago" : Math.round(ms / 60000) + " min ago";

function replicaState(r, nowMs) {
  let s = r.state || "unknown", label = s;
  if (s === "serving" && r.awaiting_agent) { s = "awaiting"; label = "awaiting agent"; }
  if (r.down) label = "down: " + r.down.reason;
  const since = r.since_ms !== undefined && nowMs !== undefined ? " for " + ((nowMs - r.since_ms) / 1000).toFixed(1) + " s" : "";
  return { cls: "st-" + (s === "serving" && !r.alive ? "down" : s), label: label + since, key: r.alive ? "serving" : s };
}

function drawServices(doc) {
  const box = document.getElementById("services");
  box.replaceChildren();
  const st = doc.status || {};
  for (const s of st.services || []) {
    const t = el("table", {},
      el("thead", {}, el("tr", {},
        el("th", {}, "replica"), el("th", {}, "state"), el("th", { class: "n" }, "connections"),
        el("th", { class: "n" }, "lag in"), el("th", { class: "n" }, "lag out"),
        el("th", { class: "n" }, "bytes from"), el("th", {}, "last heard"))));
    const tb = el("tbody");
    for (const r of s.replicas || []) {
      const rs = replicaState(r, doc.now_ms);
      tb.append(el("tr", { "data-replica": r.addr, "data-state": rs.key },
        el("td", {}, r.addr), el("td", {}, el("span", { class: "badge " + rs.cls }, rs.label)),
        el("td", { class: "n" }, fmt(r.connections)), el("td", { class: "n" }, bytes(r.lag_in_bytes)),
        el("td", { class: "n" }, bytes(r.lag_out_bytes)), el("td", { class: "n" }, bytes(r.bytes_from)),
        el("td", {}, ago(r.heard_ms_ago))));
    }
    t.append(tb);
    const up = (s.replicas || []).filter((r) => r.alive).length;
    box.append(el("div", { class: "svc", "data-service": s.name },
      el("h3", {}, `${s.name} — ${s.vip}:${(s.ports || []).join(",")}${s.removed ? " (removed)" : ""}`),
      el("div", {}, `${up} of ${(s.replicas || []).length} replicas serving · ${fmt(s.connections)} connections · clients sent ${bytes(s.client_bytes_in)}, got ${bytes(s.client_bytes_out)}`),
      t));
  }
}

function drawCounters(doc, dt) {
  const c = (doc.status || {}).counters || {};
  const tb = document.querySelector("#counters tbody");
  tb.replaceChildren();
  for (const [k, v] of Object.entries(c)) {
    if (typeof v !== "number") continue;
    const prev = last && last.counters[k];
    const rate = prev !== undefined && dt > 0 ? Math.max(0, (v - prev) / dt) : null;
    tb.append(el("tr", {}, el("td", {}, k), el("td", { class: "n" }, fmt(v)),
      el("td", { class: "n" }, rate === null ? "–" : fmt(Math.round(rate)))));
  }
  const dtb = document.querySelector("#drops tbody");
  dtb.replaceChildren();
  for (const [reason, n] of (doc.status || {}).drops || []) {
    if (!n) continue;
    const prev = last && last.drops[reason];
    const rate = prev !== undefined && dt > 0 ? Math.max(0, (n - prev) / dt) : null;
    dtb.append(el("tr", {}, el("td", {}, reason), el("td", { class: "n" }, fmt(n)),
      el("td", { class: "n" }, rate === null ? "–" : fmt(Math.round(rate)))));
  }
  const atb = document.querySelector("#agents tbody");
  atb.replaceChildren();
  for (const a of ((doc.control || {}).agents) || []) {
    atb.append(el("tr", {}, el("td", {}, a.replica || "?"), el("td", {}, a.host || ""), el("td", {}, a.state || "")));
  }
}

function drawTimeline(items) {
  const ol = document.getElementById("timeline");
  ol.replaceChildren();
  for (const e of [...items].reverse()) {
    const t = new Date(e.t_ms);
    ol.append(el("li", { class: "k-" + e.kind, "data-kind": e.kind },
      el("time", { datetime: t.toISOString() }, t.toLocaleTimeString("en-GB") + "." + String(t.getMilliseconds()).padStart(3, "0")),
      e.text + (e.count > 1 ? ` (×${e.count})` : "")));
  }
}

async function poll() {
  const started = Date.now();
  try {
    const r = await fetch("/status.json", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    const body = await r.json();
    const doc = body.snapshot || {};
    const now = Date.now();
    const dt = last ? (now - last.at) / 1000 : 0;
    document.getElementById("summary").textContent =
      `${doc.role || "?"} · v${doc.version || "?"} · pid ${doc.pid || "?"} · up ${Math.round(doc.uptime_s || 0)} s · ${fmt((doc.status || {}).connections)} connections (${fmt((doc.status || {}).half_open)} half-open)`;
    const age = doc.timestamp_ms ? now - doc.timestamp_ms : null;
    const fresh = document.getElementById("fresh");
    fresh.className = age !== null && age < 2000 ? "ok" : "stale";
    fresh.textContent = age === null ? "no snapshot" : (age < 2000 ? "live" : `snapshot ${(age / 1000).toFixed(1)} s old`);
    drawServices(doc);
    drawCounters(doc, dt);
    drawTimeline(body.timeline || []);
    const counters = {};
    for (const [k, v] of Object.entries((doc.status || {}).counters || {})) if (typeof v === "number") counters[k] = v;
    const drops = {};
    for (const [k, v] of (doc.status || {}).drops || []) drops[k] = v;
    last = { at: now, counters, drops };
  } catch (e) {
    const fresh = document.getElementById("fresh");
    fresh.className = "stale";
    fresh.textContent = "router unreachable: " + e.message;
  }
  setTimeout(poll, Math.max(0, POLL_MS - (Date.now() - started)));
}
poll();
