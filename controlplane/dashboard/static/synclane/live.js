// Shared page plumbing: Plotly figures from the server, and a websocket that reconnects
// with backoff. Nothing polls: live data arrives on the socket; after a drop the page
// asks once for what it missed (onReconnect) and carries on.
(function () {
  "use strict";
  const config = { displayModeBar: false, responsive: true };
  const MAX_POINTS = 2000;  // the window each live trace keeps

  function json(id) {
    const el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  function plot(id, fig) {
    if (!document.getElementById(id) || !fig) return;
    Plotly.newPlot(id, fig.data, fig.layout, config);
  }

  // Append one row ({metric: value, ...}) at x to every trace of a figure whose metric it has.
  function extend(id, fig, x, row) {
    const el = document.getElementById(id);
    if (!el || !fig) return 0;
    const xs = [], ys = [], idx = [];
    (fig.meta.live || []).forEach((metric, i) => {
      const v = row[metric];
      if (typeof v === "number" && isFinite(v)) { xs.push([x]); ys.push([v]); idx.push(i); }
    });
    if (idx.length) Plotly.extendTraces(el, { x: xs, y: ys }, idx, MAX_POINTS);
    return idx.length;
  }

  // Append whole series ({metric: {x: [...], y: [...]}}) — used to backfill a gap.
  function extendSeries(id, fig, series) {
    const el = document.getElementById(id);
    if (!el || !fig) return;
    const xs = [], ys = [], idx = [];
    (fig.meta.live || []).forEach((metric, i) => {
      const s = series[metric];
      if (s && s.x.length) { xs.push(s.x); ys.push(s.y); idx.push(i); }
    });
    if (idx.length) Plotly.extendTraces(el, { x: xs, y: ys }, idx, MAX_POINTS);
  }

  // Open ws path; call onMessage for each message. On a drop: back off 0.5 s .. 10 s,
  // and on every open after the first call onReconnect (to backfill).
  function connect(path, onMessage, onReconnect) {
    let delay = 500, opened = false;
    const live = document.getElementById("live-state");
    const say = (text) => { if (live) live.textContent = text; };
    function open() {
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      const socket = new WebSocket(scheme + "://" + location.host + path);
      window.synclaneSocket = socket;  // lets tests drop the connection
      socket.onopen = () => {
        say("live");
        delay = 500;
        if (opened && onReconnect) onReconnect();
        opened = true;
      };
      socket.onmessage = (event) => onMessage(JSON.parse(event.data));
      socket.onclose = (event) => {
        if (event.code === 4401 || event.code === 4404) { say("not allowed"); return; }
        say("reconnecting…");
        setTimeout(open, delay);
        delay = Math.min(delay * 2, 10000);
      };
    }
    open();
  }

  function fmtTime(iso) {
    return iso ? new Date(iso).toLocaleTimeString() : "";
  }

  window.Synclane = { json, plot, extend, extendSeries, connect, fmtTime, MAX_POINTS };
})();
