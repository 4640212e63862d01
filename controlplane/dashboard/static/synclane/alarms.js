// The alarms page (templates/dashboard/alarm_list.html); no inline script (CSP).
(function () {
  "use strict";
  window.synclane = { alarms: 0 };
  // New alarms and acknowledgements arrive live; the filtered table is the server's, so a
  // new alarm offers a reload rather than guessing whether it matches the filter.
  window.Synclane.connect("/ws/alarms/", (msg) => {
    window.synclane.alarms += 1;
    if (msg.type === "alarm") document.getElementById("alarm-news").hidden = false;
    else if (msg.type === "alarm_ack") {
      const cell = document.querySelector(`tr[data-alarm-id="${msg.data.alarm_id}"] .ack`);
      if (cell) { cell.textContent = "acknowledged by " + (msg.data.by || ""); cell.className = "ack muted"; }
    }
  });
})();
