// Keeps job rows live: polls /api/v1/jobs/<id> for rows not yet finished (no library, no CDN).
(function () {
  "use strict";
  var FINAL = { succeeded: 1, failed: 1, cancelled: 1 };
  function fmtCfg(c) {
    if (!c) return "\u2014";
    return Object.keys(c).map(function (k) { return k + "=" + c[k]; }).join(", ");
  }
  function update(row, job) {
    var s = row.querySelector('[data-field="state"]');
    if (s) { s.textContent = job.state; s.className = "state state-" + job.state; }
    var f = row.querySelector('[data-field="progress"] .fill');
    if (f) f.style.width = (100 * (job.progress || 0)).toFixed(1) + "%";
    var t = row.querySelector('[data-field="trials"]');
    if (t) t.textContent = job.trials_done + " / " + (job.trials_total || "?");
    var b = row.querySelector('[data-field="best_time_ms"]');
    if (b) b.textContent = job.best_time_ms == null ? "\u2014" : job.best_time_ms.toFixed(4) + (row.classList.contains("summary") ? " ms" : "");
    var c = row.querySelector('[data-field="best_config"]');
    if (c) c.textContent = fmtCfg(job.best_config);
    var w = row.querySelector('[data-field="waiting_reason"]');
    if (w) { w.textContent = job.waiting_reason || ""; w.hidden = !job.waiting_reason; }
    var was = row.getAttribute("data-state");
    row.setAttribute("data-state", job.state);
    // a job page reloads once when its job ends, to show the final trials and charts
    if (row.classList.contains("summary") && !FINAL[was] && FINAL[job.state]) window.location.reload();
  }
  function poll() {
    var rows = document.querySelectorAll("[data-job-id]");
    rows.forEach(function (row) {
      if (FINAL[row.getAttribute("data-state")]) return;
      fetch("/api/v1/jobs/" + row.getAttribute("data-job-id"), { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (job) { if (job) update(row, job); })
        .catch(function () {});
    });
  }
  if (document.querySelector("[data-job-id]")) setInterval(poll, 2000);
})();
