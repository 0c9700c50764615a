// floodgate dashboard: reads /ui/stats once, then one snapshot a second from
// /ui/events (Server-Sent Events), falling back to polling /ui/stats.
"use strict";
const history = [];
const MAX = 120;
const $ = (id) => document.getElementById(id);

function fmt(n) {
  if (n >= 1e6) return (n / 1e6).toFixed(2) + "M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
  if (n >= 100) return n.toFixed(0);
  return n.toFixed(1);
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
}

function render() {
  const s = history[history.length - 1];
  if (!s) return;
  $("dps").textContent = fmt(s.decisions_per_sec);
  $("ratio").textContent = (100 * s.over_limit_ratio).toFixed(1) + "%";
  $("lat").textContent = s.backend_p50_ms < 0 ? "in process" : s.backend_p50_ms.toFixed(2) + " / " + s.backend_p99_ms.toFixed(2) + " ms";
  $("errs").textContent = fmt(s.backend_errors_per_sec);
  const st = $("status");
  st.textContent = s.degraded ? "store failing: limits kept in process (degraded)" :
    s.breaker_open ? "store failing (breaker open)" : "live";
  st.className = "pill " + (s.breaker_open || s.failure_mode_per_sec > 0 ? "down" : "live");
  $("fail").textContent = fmt(s.failure_mode_per_sec || 0);
  const c = s.config || {};
  $("config").textContent = "config " + (c.version || "–") + (c.loaded ? ", loaded " + new Date(c.loaded).toLocaleTimeString() : "") +
    ", " + (c.reloads || 0) + " loads, " + (c.rejected || 0) + " rejected";

  const rb = $("rules").tBodies[0];
  rb.replaceChildren();
  for (const r of s.rules || []) {
    const tr = document.createElement("tr");
    const all = r.within + r.near + r.over + r.shadow;
    cell(tr, r.domain); cell(tr, r.descriptor, "key");
    cell(tr, fmt(r.within), "num"); cell(tr, fmt(r.near), "num"); cell(tr, fmt(r.over), "num"); cell(tr, fmt(r.shadow), "num");
    cell(tr, all > 0 ? (100 * r.over / all).toFixed(1) : "–", "num");
    rb.appendChild(tr);
  }
  const tb = $("top").tBodies[0];
  tb.replaceChildren();
  for (const k of s.top_limited || []) {
    const tr = document.createElement("tr");
    cell(tr, k.domain); cell(tr, k.key, "key");
    cell(tr, k.count + (k.error ? " (±" + k.error + ")" : ""), "num");
    tb.appendChild(tr);
  }
  draw();
}

function draw() {
  const cv = $("chart"), g = cv.getContext("2d");
  const w = cv.width, h = cv.height, pad = 28;
  g.clearRect(0, 0, w, h);
  const peak = Math.max(1, ...history.map((s) => s.decisions_per_sec));
  const x = (i) => pad + (w - pad - 4) * (i + MAX - history.length) / (MAX - 1);
  const y = (v) => h - pad + 10 - (h - pad - 4) * v / peak;
  g.strokeStyle = "#d0d7de"; g.fillStyle = "#6a737d"; g.font = "11px system-ui";
  g.beginPath(); g.moveTo(pad, y(0)); g.lineTo(w, y(0)); g.moveTo(pad, y(peak)); g.lineTo(w, y(peak)); g.stroke();
  g.fillText(fmt(peak), 2, y(peak) + 4); g.fillText("0", 2, y(0) + 4);
  const line = (get, color) => {
    g.strokeStyle = color; g.lineWidth = 2; g.beginPath();
    history.forEach((s, i) => (i ? g.lineTo(x(i), y(get(s))) : g.moveTo(x(i), y(get(s)))));
    g.stroke();
  };
  line((s) => s.decisions_per_sec - s.over_limit_per_sec, "#2e8b57");
  line((s) => s.over_limit_per_sec, "#c0392b");
}

function push(s) {
  history.push(s);
  while (history.length > MAX) history.shift();
  render();
}

async function poll() {
  try {
    const r = await fetch("stats", { cache: "no-store" });
    const all = await r.json();
    history.length = 0;
    for (const s of all || []) push(s);
  } catch (e) {
    $("status").textContent = "disconnected"; $("status").className = "pill down";
  }
}

async function start() {
  await poll();
  // ?poll selects polling, for clients without streaming (and headless tests).
  if (!window.EventSource || new URLSearchParams(location.search).has("poll")) { setInterval(poll, 1000); return; }
  const es = new EventSource("events");
  es.onmessage = (ev) => push(JSON.parse(ev.data));
  es.onerror = () => { es.close(); setInterval(poll, 1000); };
}
start();
