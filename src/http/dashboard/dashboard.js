// seckill live dashboard: polls /dashboard/data every second and derives rates and
// percentiles from the counter and histogram samples of /metrics (deltas between polls).
"use strict";
(function () {
  const POLL_MS = 1000;
  const HISTORY = 120;
  const $ = (id) => document.getElementById(id);
  let token = null, prev = null, polls = 0;
  const rates = [];

  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get("token")) {
    sessionStorage.setItem("seckill-token", hash.get("token"));
    window.history.replaceState(null, "", location.pathname);
  }
  token = sessionStorage.getItem("seckill-token");

  $("login").addEventListener("submit", (e) => {
    e.preventDefault();
    token = $("token").value.trim();
    sessionStorage.setItem("seckill-token", token);
    start();
  });

  function key(s) {
    return s.name + JSON.stringify(Object.keys(s.labels).sort().map((k) => [k, s.labels[k]]));
  }
  function index(samples) {
    const m = new Map();
    for (const s of samples) m.set(key(s), s);
    return m;
  }
  function sum(snap, name, pred) {
    let t = 0;
    for (const s of snap.samples) if (s.name === name && (!pred || pred(s.labels))) t += s.value;
    return t;
  }
  // Per-second rate of the sum of matching counters since the previous poll.
  function rate(cur, name, pred) {
    if (!prev) return null;
    const dt = (cur.now_ms - prev.now_ms) / 1000;
    if (dt <= 0) return null;
    return Math.max(0, sum(cur, name, pred) - sum(prev, name, pred)) / dt;
  }
  function fmtRate(r) { return r === null ? "–" : r >= 100 ? Math.round(r).toLocaleString("en") : r.toFixed(1); }
  function fmtInt(n) { return Math.round(n).toLocaleString("en"); }
  function fmtSecs(s) {
    if (s === null || !isFinite(s)) return "–";
    if (s < 0.001) return (s * 1e6).toFixed(0) + " µs";
    if (s < 1) return (s * 1000).toPrecision(3) + " ms";
    return s.toFixed(2) + " s";
  }
  function fmtBytes(b) { return b ? (b / 1048576).toFixed(0) + " MiB" : "–"; }

  // Quantile q of the claim latency over the last poll interval (bucket deltas), interpolated
  // within the bucket as Prometheus's histogram_quantile does.
  function quantile(cur, q) {
    if (!prev) return null;
    const name = "seckill_http_request_duration_seconds_bucket";
    const byLe = new Map();
    const before = index(prev.samples);
    for (const s of cur.samples) {
      if (s.name !== name) continue;
      const p = before.get(key(s));
      const le = s.labels.le === "+Inf" ? Infinity : parseFloat(s.labels.le);
      byLe.set(le, (byLe.get(le) || 0) + s.value - (p ? p.value : 0));
    }
    const les = [...byLe.keys()].sort((a, b) => a - b);
    const total = les.length ? byLe.get(les[les.length - 1]) : 0;
    if (total <= 0) return null;
    const want = q * total;
    let lower = 0, below = 0;
    for (const le of les) {
      const c = byLe.get(le);
      if (c >= want) {
        if (!isFinite(le)) return lower;
        return lower + (le - lower) * ((want - below) / Math.max(c - below, 1e-9));
      }
      lower = le; below = c;
    }
    return lower;
  }

  function row(tbody, id, cells) {
    let tr = tbody.querySelector(`tr[data-id="${CSS.escape(id)}"]`);
    if (!tr) {
      tr = document.createElement("tr");
      tr.dataset.id = id;
      tbody.appendChild(tr);
    }
    tr.innerHTML = "";
    for (const [cls, html] of cells) {
      const td = document.createElement("td");
      td.className = cls;
      if (html instanceof Node) td.appendChild(html); else td.textContent = html;
      tr.appendChild(td);
    }
    return tr;
  }
  function bar(remaining, total) {
    const d = document.createElement("div");
    const pct = total > 0 ? (100 * remaining) / total : 0;
    d.className = "bar" + (pct < 10 ? " low" : "");
    const fill = document.createElement("div");
    fill.style.width = pct.toFixed(1) + "%";
    d.appendChild(fill);
    return d;
  }

  function render(cur) {
    const all = rate(cur, "seckill_claims_total");
    const won = rate(cur, "seckill_claims_total", (l) => l.outcome === "won");
    $("rate-all").textContent = fmtRate(all);
    $("rate-won").textContent = fmtRate(won);
    $("p50").textContent = fmtSecs(quantile(cur, 0.5));
    $("p99").textContent = fmtSecs(quantile(cur, 0.99));
    $("in-flight").textContent = fmtInt(sum(cur, "seckill_in_flight"));
    $("rss").textContent = fmtBytes(sum(cur, "process_resident_memory_bytes"));
    if (cur.pipeline_lag !== null && cur.pipeline_lag !== undefined) {
      $("lag-tile").hidden = false;
      $("lag").textContent = fmtInt(cur.pipeline_lag);
    }

    const tbody = document.querySelector("#campaigns tbody");
    const seen = new Set();
    for (const c of cur.campaigns) {
      seen.add(c.id);
      const mine = (l) => l.campaign === c.id;
      const count = (o) => sum(cur, "seckill_claims_total", (l) => mine(l) && l.outcome === o);
      const total = sum(cur, "seckill_claims_total", mine);
      row(tbody, c.id, [
        ["id", c.id],
        ["status", c.status],
        ["stock", `${fmtInt(c.remaining)} / ${fmtInt(c.total)}`],
        ["bar-col", bar(c.remaining, c.total)],
        ["rate", fmtRate(rate(cur, "seckill_claims_total", mine))],
        ["won", fmtInt(count("won"))],
        ["sold_out", fmtInt(count("sold_out"))],
        ["other", fmtInt(total - count("won") - count("sold_out"))],
      ]).dataset.remaining = c.remaining;
    }
    for (const tr of [...tbody.children]) if (!seen.has(tr.dataset.id)) tr.remove();
    $("more").hidden = !cur.campaigns_not_shown;
    $("more").textContent = `${cur.campaigns_not_shown} more campaigns not shown`;

    const rooms = cur.rooms || [];
    $("rooms-section").hidden = rooms.length === 0;
    const rb = document.querySelector("#rooms tbody");
    const roomIds = new Set();
    for (const r of rooms) {
      roomIds.add(r.campaign);
      const mine = (l) => l.campaign === r.campaign;
      row(rb, r.campaign, [
        ["id", r.campaign],
        ["total", fmtInt(r.joined)],
        ["total", fmtInt(r.waiting)],
        ["total", fmtInt(r.admitted)],
        ["rate", fmtRate(rate(cur, "seckill_room_admitted", mine))],
        ["total", fmtInt(r.admit_per_second)],
        ["total", `${(r.estimated_wait_ms / 1000).toFixed(1)} s`],
      ]);
    }
    for (const tr of [...rb.children]) if (!roomIds.has(tr.dataset.id)) tr.remove();
    $("tickets-refused").textContent = fmtInt(sum(cur, "seckill_room_tickets_refused_total", () => true));

    const sinks = cur.sinks || [];
    $("sinks-section").hidden = sinks.length === 0;
    const sb = document.querySelector("#sinks tbody");
    const sinkIds = new Set();
    for (const k of sinks) {
      sinkIds.add(k.id);
      row(sb, k.id, [
        ["id", k.id],
        ["kind", k.kind],
        ["target", k.url],
        ["status", k.state + (k.failing_since ? " (failing)" : "")],
        ["total", fmtInt(k.backlog)],
        ["total", fmtInt(k.delivered)],
        ["total", fmtInt(k.failed_attempts)],
        ["total", fmtInt(k.dead_letters)],
        ["error", k.last_error || ""],
        ["owner", k.delivered_by || "–"],
      ]);
    }
    for (const tr of [...sb.children]) if (!sinkIds.has(tr.dataset.id)) tr.remove();

    const outcomes = new Set();
    for (const s of cur.samples) if (s.name === "seckill_claims_total") outcomes.add(s.labels.outcome);
    const ob = document.querySelector("#outcomes tbody");
    for (const o of [...outcomes].sort()) {
      const pred = (l) => l.outcome === o;
      const t = sum(cur, "seckill_claims_total", pred);
      if (t === 0) continue;
      row(ob, o, [["outcome", o], ["rate", fmtRate(rate(cur, "seckill_claims_total", pred))], ["total", fmtInt(t)]]);
    }

    const gb = document.querySelector("#guards tbody");
    const guards = [
      ["rate limited (user)", "seckill_rate_limited_total", (l) => l.subject === "user"],
      ["rate limited (ip)", "seckill_rate_limited_total", (l) => l.subject === "ip"],
      ["rate limited (capacity)", "seckill_rate_limited_total", (l) => l.subject === "capacity"],
      ["shed (in-flight bound)", "seckill_shed_total"],
      ["timed out", "seckill_timeouts_total"],
      ["identity refused", "seckill_identity_refused_total"],
      ["admission gate", "seckill_campaign_admission_refused_total"],
      ["sold_out from memory", "seckill_campaign_fast_sold_out_total"],
    ];
    for (const [label, name, pred] of guards) {
      row(gb, label, [["guard", label], ["rate", fmtRate(rate(cur, name, pred))], ["total", fmtInt(sum(cur, name, pred))]]);
    }

    if (all !== null) {
      rates.push(all);
      if (rates.length > HISTORY) rates.shift();
      spark();
    }
  }

  function spark() {
    const c = $("spark"), g = c.getContext("2d");
    const w = c.width, h = c.height;
    g.clearRect(0, 0, w, h);
    const max = Math.max(1, ...rates);
    g.strokeStyle = "#d9480f"; g.lineWidth = 2; g.beginPath();
    rates.forEach((v, i) => {
      const x = (i / (HISTORY - 1)) * w, y = h - 6 - (v / max) * (h - 16);
      i ? g.lineTo(x, y) : g.moveTo(x, y);
    });
    g.stroke();
    g.fillStyle = "#6b7280"; g.font = "12px system-ui";
    g.fillText("max " + fmtRate(max) + "/s", 8, 14);
  }

  async function poll() {
    try {
      const r = await fetch("/dashboard/data", { headers: { authorization: "Bearer " + token } });
      if (r.status === 401) {
        sessionStorage.removeItem("seckill-token");
        $("board").hidden = true; $("login").hidden = false;
        $("status").textContent = "the admin token was refused";
        $("status").className = "err";
        return;
      }
      if (!r.ok) throw new Error("HTTP " + r.status);
      const cur = await r.json();
      render(cur);
      prev = cur;
      polls += 1;
      $("status").className = "muted";
      $("status").dataset.polls = polls;
      $("status").textContent = "updated " + new Date(cur.now_ms).toLocaleTimeString() + " · every 1 s";
    } catch (e) {
      $("status").className = "err";
      $("status").textContent = "no answer from the server (" + e.message + "); retrying";
    }
    setTimeout(poll, POLL_MS);
  }

  function start() {
    $("login").hidden = true;
    $("board").hidden = false;
    poll();
  }

  if (token) start(); else { $("login").hidden = false; $("status").textContent = "admin token needed"; }
})();
