// Job page: draw the stored history, then extend it live from ws/jobs/<id>/.
// Nothing polls: every update arrives on the websocket.
(function () {
  "use strict";
  const root = document.getElementById("job");
  const jobId = root.dataset.jobId;
  const history = JSON.parse(document.getElementById("history").textContent);
  const MAX_POINTS = 5000;
  const layout = (title, ytitle) => ({
    title: { text: title, font: { size: 14 } },
    margin: { l: 50, r: 10, t: 35, b: 40 },
    xaxis: { title: { text: "step" } },
    yaxis: { title: { text: ytitle } },
    legend: { orientation: "h" },
  });
  const config = { displayModeBar: false, responsive: true };

  Plotly.newPlot("chart-loss", [
    { x: history.step, y: history.loss, name: "train loss", mode: "lines" },
    { x: history.step, y: history.val_loss, name: "validation loss", mode: "markers", connectgaps: true },
  ], layout("Loss", "loss"), config);
  Plotly.newPlot("chart-throughput", [
    { x: history.step, y: history.samples_per_s, name: "samples/s", mode: "lines" },
    { x: history.step, y: history.tokens_per_s, name: "tokens/s", mode: "lines", yaxis: "y2" },
  ], Object.assign(layout("Throughput", "samples/s"), {
    yaxis2: { title: { text: "tokens/s" }, overlaying: "y", side: "right" },
  }), config);

  // Points drawn so far, exposed for tests and curious users.
  window.synclane = { points: history.step.length };

  function onMetrics(data) {
    const step = data.step;
    const val = data.val_loss === undefined ? null : data.val_loss;
    Plotly.extendTraces("chart-loss", { x: [[step], [step]], y: [[data.loss], [val]] }, [0, 1], MAX_POINTS);
    Plotly.extendTraces("chart-throughput",
      { x: [[step], [step]], y: [[data.samples_per_s], [data.tokens_per_s]] }, [0, 1], MAX_POINTS);
    window.synclane.points += 1;
    document.getElementById("job-step").textContent = step;
  }

  function onStatus(msg) {
    const badge = document.getElementById("job-status");
    badge.textContent = msg.status;
    badge.className = "status status-" + msg.status;
    document.getElementById("job-reason").textContent = msg.reason || "";
    document.getElementById("job-restarts").textContent = msg.restarts;
    if (msg.previous) {
      const li = document.createElement("li");
      li.innerHTML = "<time></time> " + msg.previous + " → <b></b> ";
      li.querySelector("time").textContent = new Date(msg.at).toLocaleTimeString();
      li.querySelector("b").textContent = msg.status;
      li.append(msg.reason || "");
      document.getElementById("events").append(li);
    }
  }

  let delay = 500;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(scheme + "://" + location.host + "/ws/jobs/" + jobId + "/");
    const live = document.getElementById("live-state");
    socket.onopen = () => { live.textContent = "live"; delay = 500; };
    socket.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      if (msg.type === "metrics") onMetrics(msg.data);
      else if (msg.type === "status") onStatus(msg);
    };
    socket.onclose = (event) => {
      if (event.code === 4401 || event.code === 4404) { live.textContent = "not allowed"; return; }
      live.textContent = "reconnecting…";
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);  // back off up to 10 s
    };
  }
  connect();
})();
