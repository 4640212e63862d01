// Job page: draw the stored history, then extend it live from ws/jobs/<id>/.
(function () {
  "use strict";
  const S = window.Synclane;
  const root = document.getElementById("job");
  const jobId = root.dataset.jobId;
  const steps = Number(root.dataset.steps);
  const figures = S.json("figures");
  const history = S.json("history");
  const charts = { loss: "chart-loss", throughput: "chart-throughput", time: "chart-time",
                   bandwidth: "chart-bandwidth", drift: "chart-drift" };
  Object.entries(charts).forEach(([name, id]) => S.plot(id, figures[name]));

  // Exposed for tests and curious users.
  const state = window.synclane = {
    points: countPoints(history.metrics.loss), lastStep: history.last_step || 0,
    links: history.links, alarms: {}, backfills: 0, heatmapMetric: "bandwidth_mbps",
    periods: (history.periods || []).map((p) => p.slice()), startedAt: Date.now(), startStep: history.last_step || 0,
    logLines: 0,
  };

  // --- derived figures (mirror of dashboard.charts.derive) ---
  function derive(d) {
    const out = Object.assign({}, d);
    const comm = num(d.comm_time_s), exposed = num(d.exposed_comm_s), st = num(d.step_time_s);
    if (st !== null && (exposed !== null || comm !== null)) out.compute_time_s = Math.max(0, st - (exposed !== null ? exposed : comm));
    if (num(d.allocation_bps) !== null) out.allocation_mbps = d.allocation_bps / 1e6;
    if (num(d.busbw_bps) !== null) out.achieved_mbps = d.busbw_bps / 1e6;
    else if (num(d.bytes_sent) !== null && comm) out.achieved_mbps = d.bytes_sent * 8 / comm / 1e6;
    return out;
  }
  function num(v) { return typeof v === "number" && isFinite(v) ? v : null; }
  function countPoints(s) { return s ? s.x.length : 0; }

  // --- metrics: queued, then drawn once per animation frame ---
  // A fast run sends tens of steps a second; drawing each one separately (5 charts and a
  // relayout) would leave the page seconds behind. One frame extends every chart at once.
  let pending = [];
  function onMetrics(data) {
    const none = document.getElementById("no-metrics");
    if (none) none.remove();
    if (typeof data.step !== "number" || data.step <= state.lastStep) return;  // seen (backfill)
    state.lastStep = data.step;
    if (!pending.length) requestAnimationFrame(flush);
    pending.push(derive(data));
  }
  function flush() {
    const rows = pending;
    pending = [];
    if (!rows.length) return;
    const series = {};
    rows.forEach((row) => Object.keys(row).forEach((k) => {
      if (num(row[k]) === null) return;
      (series[k] = series[k] || { x: [], y: [] }).x.push(row.step);
      series[k].y.push(row[k]);
    }));
    Object.entries(charts).forEach(([name, id]) => S.extendSeries(id, figures[name], series));
    state.points += series.loss ? series.loss.x.length : 0;
    const last = rows[rows.length - 1].step;
    let changed = false;
    rows.forEach((row) => { if ("sync_enhanced" in row) changed = setEnhanced(row.step, !!row.sync_enhanced) || changed; });
    if (changed || state.periods.some((p) => p[1] === null)) redrawPeriods(last);
    progress(last);
  }

  function progress(step) {
    document.getElementById("job-step").textContent = step;
    const bar = document.getElementById("job-progress");
    if (bar) bar.value = step;
    const eta = document.getElementById("job-eta");
    const done = step - state.startStep, elapsed = (Date.now() - state.startedAt) / 1000;
    if (eta && done > 0 && elapsed > 1) eta.textContent = "ETA " + Math.round((steps - step) * elapsed / done) + " s";
  }

  // --- drift: enhancement periods shaded, threshold line kept ---
  // Returns whether the periods changed (the caller redraws).
  function setEnhanced(step, on) {
    const open = state.periods.find((p) => p[1] === null);
    if (on && !open) { state.periods.push([step, null]); return true; }
    if (!on && open) { open[1] = step; return true; }
    return false;
  }
  function redrawPeriods(lastStep) {
    const el = document.getElementById("chart-drift");
    if (!el) return;
    const shapes = state.periods.map(([a, b]) => ({
      type: "rect", xref: "x", yref: "paper", x0: a, x1: b === null ? lastStep : b, y0: 0, y1: 1,
      fillcolor: "rgba(224,161,0,0.18)", line: { width: 0 }, layer: "below", name: b === null ? "open" : "closed",
    }));
    const t = figures.drift.meta.threshold;
    if (t !== null && t !== undefined) shapes.push({ type: "line", xref: "paper", yref: "y", x0: 0, x1: 1, y0: t, y1: t,
      line: { color: "#c2352b", dash: "dash", width: 1.5 }, name: "threshold" });
    const update = { shapes: shapes };
    // Without drift points (a strategy that does not measure drift) Plotly would not
    // widen the axis for shapes alone: show the steps so far.
    if (!el.data[0].x.length) { update["xaxis.range"] = [0, Math.max(1, lastStep)]; state.driftRange = true; }
    else if (state.driftRange) { update["xaxis.autorange"] = true; state.driftRange = false; }
    Plotly.relayout(el, update);
  }

  // --- link health heatmap ---
  const CODES = { ok: 0, degraded: 1, down: 2 };
  // Mirror of charts.REISSUED_MARK / REISSUED_NOTE: a re-issued pair keeps its colour.
  const REISSUED_MARK = " ↻", REISSUED_NOTE = " · re-issued (first probe slow, probed again)";
  function drawHeatmap() {
    const m = state.links, metric = state.heatmapMetric;
    const fig = figures.heatmap;
    const trace = Object.assign({}, fig.data[0], {
      x: m.ranks.map((r) => "to " + r), y: m.ranks.map((r) => "rank " + r),
      z: m.state.map((row) => row.map((s) => (s === null ? null : CODES[s]))),
      text: m[metric].map((row, i) => row.map((v, j) => fmt(v) + (m.reissued[i][j] ? REISSUED_MARK : ""))),
      customdata: m.reissued.map((row) => row.map((again) => (again ? REISSUED_NOTE : ""))),
    });
    const label = { bandwidth_mbps: "bandwidth (Mbit/s)", latency_ms: "latency (ms)", jitter_ms: "jitter (ms)" }[metric];
    const layout = Object.assign({}, fig.layout, { title: { text: "Link health · " + label, font: { size: 14 } } });
    Plotly.react("chart-heatmap", [trace], layout, { displayModeBar: false, responsive: true });
    state.measured = m.state.flat().filter((s) => s !== null).length;
    state.reissued = m.reissued.flat().filter(Boolean).length;
    document.getElementById("reissued-key").hidden = !state.reissued;  // the key only when it applies
  }
  // Mirror of charts._fmt: three significant digits, whole numbers from 100 up.
  function fmt(v) {
    if (v === null || v === undefined) return "";
    return Math.abs(v) >= 100 ? Math.round(v).toString() : String(Number(Number(v).toPrecision(3)));
  }
  const LINK_KEYS = ["bandwidth_mbps", "latency_ms", "jitter_ms", "state", "reissued"];
  function grow(n) {
    const m = state.links;
    while (m.ranks.length < n) {
      m.ranks.push(m.ranks.length);
      LINK_KEYS.forEach((k) => {
        m[k].forEach((row) => row.push(null));
        m[k].push(new Array(m.ranks.length).fill(null));
      });
    }
  }
  // Mirror of telemetry.series.link_matrix: a pair probed one way fills its mirror cell
  // until the other direction is measured itself.
  const direct = new Set();
  function onLink(data) {
    (data.cells || []).forEach((c) => {
      grow(Math.max(c.src, c.dst) + 1);
      direct.add(c.src + ">" + c.dst);
      const put = (i, j) => LINK_KEYS.forEach((k) => { state.links[k][i][j] = c[k]; });
      put(c.src, c.dst);
      if (!direct.has(c.dst + ">" + c.src)) put(c.dst, c.src);
    });
    drawHeatmap();
  }
  document.querySelectorAll("[data-heatmap-metric]").forEach((b) => b.addEventListener("click", () => {
    state.heatmapMetric = b.dataset.heatmapMetric;
    drawHeatmap();
  }));

  // --- alarms ---
  const tbody = document.getElementById("alarm-rows");
  function alarmKey(a) { return a.alarm_id; }
  function renderAlarm(a) {
    let tr = tbody.querySelector(`tr[data-alarm-id="${alarmKey(a)}"]`);
    if (!tr) {
      tr = document.createElement("tr");
      tr.dataset.alarmId = alarmKey(a);
      tbody.prepend(tr);
      const empty = document.getElementById("alarm-empty");
      if (empty) empty.remove();
    }
    const open = !a.cleared_at;
    tr.className = open ? "alarm-open" : "alarm-cleared";
    tr.dataset.kind = a.kind;
    tr.innerHTML = "<td></td><td></td><td></td><td></td><td></td><td></td><td class='muted'></td>";
    const cells = tr.children;
    cells[0].innerHTML = `<span class="status ${open ? "status-failed" : "status-succeeded"}">${open ? "raised" : "cleared"}</span>`;
    cells[1].textContent = a.kind;
    cells[2].textContent = a.step === null || a.step === undefined ? "" : a.step;
    cells[3].textContent = a.value === null || a.value === undefined ? "" : Number(a.value).toPrecision(3);
    cells[4].textContent = a.threshold === null || a.threshold === undefined ? "" : Number(a.threshold).toPrecision(3);
    cells[5].textContent = S.fmtTime(a.raised_at) + (a.cleared_at ? " → " + S.fmtTime(a.cleared_at) : "");
    cells[6].textContent = (a.detail || "") + (a.acknowledged ? " · acknowledged" + (a.acknowledged_by ? " by " + a.acknowledged_by : "") : "");
    state.alarms[alarmKey(a)] = a;
  }
  function onAlarm(data) {
    const when = new Date((data.ts || Date.now() / 1000) * 1000).toISOString();
    let a;
    if (data.state === "cleared") {
      a = state.alarms[data.alarm_id] || Object.values(state.alarms).find((x) => x.kind === data.kind && !x.cleared_at);
      if (!a) return;
      a = Object.assign({}, a, { cleared_at: when });
      if (data.kind === "sync_drift" && setEnhanced(data.step || state.lastStep, false)) redrawPeriods(state.lastStep);
    } else {
      a = { alarm_id: data.alarm_id, kind: data.kind, step: data.step, value: data.value, threshold: data.threshold,
            detail: data.detail, raised_at: when, cleared_at: null, acknowledged: false };
      if (data.kind === "sync_drift") {
        if (typeof data.threshold === "number") figures.drift.meta.threshold = data.threshold;  // the run's own
        setEnhanced(data.step || state.lastStep, true);
        redrawPeriods(state.lastStep);
      }
    }
    renderAlarm(a);
  }
  function onAck(data) {
    const a = state.alarms[data.alarm_id];
    if (a) renderAlarm(Object.assign({}, a, { acknowledged: true, acknowledged_by: data.by }));
  }

  // --- status and allocation ---
  function onStatus(msg) {
    const badge = document.getElementById("job-status");
    badge.textContent = msg.status;
    badge.className = "status status-" + msg.status;
    document.getElementById("job-reason").textContent = msg.reason || "";
    document.getElementById("job-restarts").textContent = msg.restarts + " of " + msg.max_restarts;
    document.getElementById("job-resumed-from").textContent =
      msg.resumed_from_step === null || msg.resumed_from_step === undefined ? "—" : "step " + msg.resumed_from_step;
    if (msg.previous) {
      const li = document.createElement("li");
      li.innerHTML = "<time></time> " + msg.previous + " → <b></b> ";
      li.querySelector("time").textContent = S.fmtTime(msg.at);
      li.querySelector("b").textContent = msg.status;
      li.append(msg.reason || "");
      document.getElementById("events").append(li);
    }
  }
  function onAllocation(data) {
    const el = document.getElementById("job-allocation");
    if (el && typeof data.allocation_mbps === "number") el.textContent = data.allocation_mbps.toFixed(1) + " Mbit/s";
  }

  // --- logs: every rank's new lines arrive on the socket (a bounded backlog first); the
  // select shows one rank. Each rank keeps its last LOG_LINES lines.
  const LOG_LINES = 1000;
  const FAILURE = /Traceback|Error|error:|FAILED|Killed/;
  const logView = document.getElementById("log-view");
  const logSource = document.getElementById("log-source");
  let logs = {};
  function onLog(msg) {
    const lines = (logs[msg.rank] = logs[msg.rank] || []);
    lines.push(...msg.lines);
    if (lines.length > LOG_LINES) lines.splice(0, lines.length - LOG_LINES);
    state.logLines += msg.lines.length;
    const option = logSource.querySelector(`option[value="${msg.rank}"]`);
    if (option && !option.dataset.failing && msg.lines.some((l) => FAILURE.test(l))) {
      option.dataset.failing = "1";
      option.textContent += " · failing";
    }
    if (msg.rank === logSource.value) showLog();
  }
  function showLog() {
    const lines = logs[logSource.value] || [];
    const atBottom = logView.scrollTop + logView.clientHeight >= logView.scrollHeight - 4;
    logView.textContent = lines.length ? lines.join("\n") : logView.dataset.empty;
    if (atBottom) logView.scrollTop = logView.scrollHeight;
  }
  logSource.addEventListener("change", showLog);
  showLog();

  // --- backfill after a reconnect: what came after the last step we drew ---
  async function backfill() {
    logs = {};  // the new socket sends each log's backlog again
    const resp = await fetch(`/jobs/${jobId}/history.json?after_step=${state.lastStep}`, { credentials: "same-origin" });
    if (!resp.ok) return;
    const h = await resp.json();
    Object.entries(charts).forEach(([name, id]) => S.extendSeries(id, figures[name], h.metrics));
    state.points += countPoints(h.metrics.loss);
    if (h.last_step && h.last_step > state.lastStep) { state.lastStep = h.last_step; progress(h.last_step); }
    state.links = h.links; drawHeatmap();
    h.alarms.forEach(renderAlarm);
    state.backfills += 1;
  }

  history.alarms.slice().reverse().forEach(renderAlarm);
  drawHeatmap();
  redrawPeriods(state.lastStep);
  S.connect(`/ws/jobs/${jobId}/`, (msg) => {
    if (msg.type === "metrics") onMetrics(msg.data);
    else if (msg.type === "link") onLink(msg.data);
    else if (msg.type === "alarm") onAlarm(msg.data);
    else if (msg.type === "alarm_ack") onAck(msg.data);
    else if (msg.type === "allocation") onAllocation(msg.data);
    else if (msg.type === "status") onStatus(msg);
    else if (msg.type === "log") onLog(msg);
  }, backfill);
})();
