// Cluster page: topology, allocation by tenant (stacked), throughput of all runs; live from ws/cluster/.
(function () {
  "use strict";
  const S = window.Synclane;
  const figures = S.json("figures");
  S.plot("chart-topology", figures.topology);
  S.plot("chart-allocation", figures.allocation);
  S.plot("chart-cluster-throughput", figures.throughput);
  const alloc = {};  // tenant -> job -> Mbit/s, the latest seen
  const state = window.synclane = { messages: 0 };

  function traceIndex(id, fig, name, stacked) {
    let i = fig.meta.live.indexOf(name);
    if (i < 0) {
      fig.meta.live.push(name);
      const trace = { type: "scatter", mode: "lines", name: name, x: [], y: [] };
      if (stacked) Object.assign(trace, { stackgroup: "one", line: { width: 0.5 } });
      Plotly.addTraces(id, trace);
      i = fig.meta.live.length - 1;
    }
    return i;
  }

  // Every 2 s, one stacked point per tenant from the latest allocations (no request: local data).
  setInterval(() => {
    const now = new Date().toISOString();
    Object.entries(alloc).forEach(([tenant, jobs]) => {
      const i = traceIndex("chart-allocation", figures.allocation, tenant, true);
      const sum = Object.values(jobs).reduce((a, b) => a + b, 0);
      Plotly.extendTraces("chart-allocation", { x: [[now]], y: [[sum]] }, [i], S.MAX_POINTS);
    });
  }, 2000);

  // A node's state (ready, cordoned, draining, lost) as the control plane last told it.
  function showNode(name, data) {
    const row = document.querySelector(`tr.node-row[data-node="${CSS.escape(name)}"]`);
    if (!row || !data || !data.state) return;
    const badge = row.querySelector(".node-state");
    badge.textContent = data.state;
    badge.className = "node-state state-" + data.state;
    let reason = row.querySelector(".node-reason");
    if (!reason && data.state_reason) {
      reason = document.createElement("span");
      reason.className = "muted small node-reason";
      badge.after(" ", reason);
    }
    if (reason) reason.textContent = data.state_reason || "";
    state.nodes = (state.nodes || 0) + 1;
  }

  S.connect("/ws/cluster/", (msg) => {
    state.messages += 1;
    if (msg.type === "node") return showNode(msg.node, msg.data);
    if (msg.type === "nodes" && msg.data) {
      Object.entries(msg.data).forEach(([name, data]) => showNode(name, data));
      return;
    }
    const tenant = msg.tenant || (msg.data && msg.data.tenant);
    if (msg.type === "allocation" && tenant) {
      (alloc[tenant] = alloc[tenant] || {})[msg.job] = Number(msg.data.allocation_mbps) || 0;
      const cell = document.querySelector(`tr[data-job-id="${msg.job}"] .allocation`);
      if (cell) cell.textContent = Number(msg.data.allocation_mbps).toFixed(1) + " Mbit/s";
    } else if (msg.type === "metrics" && msg.data) {
      if (typeof msg.data.allocation_bps === "number" && tenant) (alloc[tenant] = alloc[tenant] || {})[msg.job] = msg.data.allocation_bps / 1e6;
      if (typeof msg.data.samples_per_s === "number") {
        const name = String(msg.job);
        const i = traceIndex("chart-cluster-throughput", figures.throughput, name, false);
        Plotly.extendTraces("chart-cluster-throughput", { x: [[new Date().toISOString()]], y: [[msg.data.samples_per_s]] }, [i], S.MAX_POINTS);
        const cell = document.querySelector(`tr[data-job-id="${msg.job}"] .rate`);
        if (cell) cell.textContent = msg.data.samples_per_s.toFixed(1);
      }
    }
  });
})();
