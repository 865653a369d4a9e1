// Keeps the dashboard live without reloads (no library, no CDN):
// - the jobs page polls /api/v1/jobs with its filters: rows update, new jobs appear at the top;
// - a job page polls /api/v1/jobs/<id> and, when its trials or state change, swaps in its trial
//   sections (charts, table, explanations) rendered again by the server (/jobs/<id>/live).
(function () {
  "use strict";
  var FINAL = { succeeded: 1, failed: 1, cancelled: 1 };
  var PERIOD_MS = 2000;

  function fmtCfg(c) {
    if (!c) return "\u2014";
    return Object.keys(c).map(function (k) { return k + "=" + c[k]; }).join(", ");
  }
  function field(row, name) { return row.querySelector('[data-field="' + name + '"]'); }
  function getJson(url) {
    return fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; });
  }

  function update(row, job) {
    var s = field(row, "state");
    if (s) { s.textContent = job.state; s.className = "state state-" + job.state; }
    var p = field(row, "progress");
    var f = p && p.querySelector(".fill");
    if (f) f.style.width = (100 * (job.progress || 0)).toFixed(1) + "%";
    var t = field(row, "trials");
    if (t) t.textContent = job.trials_done + " / " + (job.trials_total || "?");
    var b = field(row, "best_time_ms");
    if (b) b.textContent = job.best_time_ms == null ? "\u2014" : job.best_time_ms.toFixed(4) + (row.classList.contains("summary") ? " ms" : "");
    var c = field(row, "best_config");
    if (c) c.textContent = fmtCfg(job.best_config);
    var w = field(row, "waiting_reason");
    if (w) { w.textContent = job.waiting_reason || ""; w.hidden = !job.waiting_reason; }
    row.setAttribute("data-state", job.state);
  }

  function newRow(job) {
    var tpl = document.getElementById("job-row-template");
    var row = tpl.content.querySelector("tr").cloneNode(true);
    row.setAttribute("data-job-id", String(job.id));
    row.classList.add("new");
    var link = field(row, "link");
    link.href = "/jobs/" + job.id; link.textContent = String(job.id);
    var k = field(row, "kernel");
    k.href = "/kernels/" + job.kernel_id; k.textContent = job.kernel_name || ("kernel " + job.kernel_id);
    field(row, "gpu_model").textContent = job.gpu_model || "any";
    field(row, "created_at").textContent = (job.created_at || "").replace("T", " ").slice(0, 19);
    update(row, job);
    return row;
  }

  // --- the jobs page -----------------------------------------------------------------------
  function pollList(table) {
    var q = new URLSearchParams({ limit: table.getAttribute("data-limit") || "50" });
    [["state", "data-state"], ["kernel", "data-kernel"], ["gpu_model", "data-gpu-model"]].forEach(function (a) {
      var v = table.getAttribute(a[1]);
      if (v) q.set(a[0], v);
    });
    getJson("/api/v1/jobs?" + q.toString()).then(function (page) {
      if (!page) return;
      var body = table.tBodies[0];
      var first = body.querySelector("tr.job-row");
      var newest = first ? parseInt(first.getAttribute("data-job-id"), 10) : 0;
      var added = [];
      page.items.forEach(function (job) {
        var row = body.querySelector('tr.job-row[data-job-id="' + job.id + '"]');
        if (row) update(row, job);
        else if (job.id > newest) added.push(newRow(job));
      });
      // items come newest first: insert them above the rows shown, in that order
      for (var i = added.length - 1; i >= 0; i--) body.insertBefore(added[i], body.firstChild);
      if (added.length) {
        table.hidden = false;
        var empty = document.getElementById("no-jobs");
        if (empty) empty.hidden = true;
      }
    }).catch(function () {});
  }

  // --- a job page ----------------------------------------------------------------------------
  function refreshSections(live) {
    return fetch(live.getAttribute("data-src"), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        // sent to the login page (the session ended): go there rather than show it inside this one
        if (r.redirected && r.url.indexOf("/login") !== -1) { window.location.href = r.url; return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) { if (html != null) live.innerHTML = html; });
  }
  function pollJob(summary, live) {
    if (FINAL[summary.getAttribute("data-state")]) return;
    getJson("/api/v1/jobs/" + summary.getAttribute("data-job-id")).then(function (job) {
      if (!job) return;
      var changed = String(job.trials_done) !== summary.getAttribute("data-trials") ||
                    job.state !== summary.getAttribute("data-state");
      update(summary, job);
      summary.setAttribute("data-trials", String(job.trials_done));
      if (FINAL[job.state]) {
        var cancel = document.getElementById("cancel-job");
        if (cancel) cancel.closest("form").remove();
      }
      if (changed && live) refreshSections(live);
    }).catch(function () {});
  }

  var table = document.querySelector('table#jobs[data-live="on"]');
  if (table) setInterval(function () { pollList(table); }, PERIOD_MS);
  var summary = document.querySelector(".job-row.summary[data-job-id]");
  if (summary) {
    var live = document.getElementById("job-live");
    setInterval(function () { pollJob(summary, live); }, PERIOD_MS);
  }
})();
