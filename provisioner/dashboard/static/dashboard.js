// provisioner dashboard: local times, relative ages and an opt-in live reload. No network
// calls besides reloading this page; the page works without this script.
(function () {
  "use strict";

  function ago(seconds) {
    var s = Math.abs(seconds), unit, n;
    if (s < 60) { n = Math.round(s); unit = "s"; }
    else if (s < 3600) { n = Math.round(s / 60); unit = "min"; }
    else if (s < 86400) { n = Math.round(s / 3600); unit = "h"; }
    else { n = Math.round(s / 86400); unit = "d"; }
    return seconds >= 0 ? n + " " + unit + " ago" : "in " + n + " " + unit;
  }

  function localTimes() {
    var now = Date.now();
    var nodes = document.querySelectorAll("time[datetime]");
    for (var i = 0; i < nodes.length; i++) {
      var t = Date.parse(nodes[i].getAttribute("datetime"));
      if (isNaN(t)) { continue; }
      var d = new Date(t);
      nodes[i].title = d.toLocaleString() + " (" + nodes[i].getAttribute("datetime") + ")";
      nodes[i].textContent = ago((now - t) / 1000);
    }
  }

  function live() {
    var box = document.getElementById("live");
    if (!box) { return; }
    var key = "provisioner.live";
    var on = false;
    try { on = window.localStorage.getItem(key) === "1"; } catch (e) { on = false; }
    box.checked = on;
    var timer = null;
    function arm() {
      if (timer) { window.clearTimeout(timer); timer = null; }
      if (box.checked) {
        timer = window.setTimeout(function () {
          if (document.visibilityState === "visible") { window.location.reload(); } else { arm(); }
        }, 10000);
      }
    }
    box.addEventListener("change", function () {
      try { window.localStorage.setItem(key, box.checked ? "1" : "0"); } catch (e) { /* private mode */ }
      arm();
    });
    arm();
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes();
    live();
    window.setInterval(localTimes, 30000);
    document.documentElement.setAttribute("data-ready", "1");
  });
})();
