// The tenant overview page (templates/dashboard/tenant_detail.html); no inline script (CSP).
(function () {
  "use strict";
  const S = window.Synclane, slug = document.getElementById("tenant").dataset.slug;
  S.plot("chart-usage", S.json("usage-figure"));
  window.synclane = { messages: 0 };
  function row(job) { return document.querySelector(`tr[data-job-id="${job}"]`); }
  S.connect(`/ws/tenants/${slug}/`, (msg) => {
    window.synclane.messages += 1;
    const tr = row(msg.job);
    if (msg.type === "status" && tr) {
      const badge = tr.querySelector(".status");
      if (badge) { badge.textContent = msg.status; badge.className = "status status-" + msg.status; }
    } else if (msg.type === "metrics" && tr && tr.querySelector(".step")) {
      tr.querySelector(".step").textContent = msg.data.step + " / " + (tr.querySelector(".step").textContent.split("/")[1] || "").trim();
    } else if (msg.type === "allocation" && tr && tr.querySelector(".allocation")) {
      tr.querySelector(".allocation").textContent = Number(msg.data.allocation_mbps).toFixed(1) + " Mbit/s";
    } else if (msg.type === "alarm") {
      const li = document.createElement("li");
      li.innerHTML = "<time></time> <b></b> ";
      li.querySelector("time").textContent = new Date().toLocaleTimeString();
      li.querySelector("b").textContent = msg.data.kind;
      li.append(`job ${msg.job} · ${msg.data.state}`);
      const none = document.getElementById("no-alarms"); if (none) none.remove();
      document.getElementById("tenant-alarms").prepend(li);
    }
  });
})();
