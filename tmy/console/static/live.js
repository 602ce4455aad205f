/* tmy console, Live runs: follow live/stream (Server-Sent Events) and put each run at the
   top of the table. Every value is set as text (textContent), never as markup. Without
   this script the page still lists the newest runs the daemon keeps. */
(function () {
  "use strict";
  var MAX_ROWS = 200;
  var status = document.getElementById("live-status");
  var body = document.getElementById("live-runs");
  if (!status || !body || !window.EventSource) { return; }
  var waiting = [];
  var scheduled = false;

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    if (cls) { td.className = cls; }
    if (text !== null && text !== undefined) { td.textContent = String(text); }
    tr.appendChild(td);
    return td;
  }
  function link(td, href, text) {
    var a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    td.appendChild(a);
  }
  function query(fields) {
    return Object.keys(fields).map(function (k) {
      return encodeURIComponent(k) + "=" + encodeURIComponent(fields[k] === null || fields[k] === undefined ? "" : fields[k]);
    }).join("&");
  }
  function when(at) {
    return typeof at === "number" ? new Date(at * 1000).toISOString().slice(0, 19) + "Z" : String(at || "");
  }
  function runRow(r) {
    var base = window.tmyConsole ? window.tmyConsole.url("") : "";
    r.trace_url = r.trace_url || (r.trace_id ? base + "live/trace?" + query({id: r.trace_id}) : "");
    r.replay_url = r.replay_url || base + "playground?" + query({text: r.text, user: r.user, chat: r.chat, platform: r.platform});
    var tr = document.createElement("tr");
    tr.className = "fresh" + (r.error ? " failed" : "") + (r.kind === "unmatched" ? " unmatched" : "");
    cell(tr, when(r.at));
    var rule = r.rule || "(none)";
    if (r.nested) { rule += " (as a tool)"; }
    if (r.scheduled) { rule += " (scheduled)"; }
    cell(tr, rule);
    cell(tr, r.user);
    cell(tr, r.chat);
    cell(tr, r.platform);
    var said = (r.text || "") + (r.kind === "run" ? " → " + (r.answer || "") : " (" + (r.reason || "") + ")");
    cell(tr, said, "answer");
    cell(tr, r.error || "", "error");
    cell(tr, r.ms === null || r.ms === undefined ? "" : r.ms);
    var links = cell(tr, null);
    if (r.trace_url) { link(links, r.trace_url, "trace"); links.appendChild(document.createTextNode(" · ")); }
    link(links, r.replay_url, "replay");
    return tr;
  }
  function skippedRow(n) {
    var tr = document.createElement("tr");
    tr.className = "skipped";
    var td = cell(tr, n + " run" + (n === 1 ? "" : "s") + " skipped (sampled out or more than this view can show; failed runs are always shown)");
    td.colSpan = 9;
    return tr;
  }
  function sampledRow(n) {
    var tr = skippedRow(n);
    tr.firstChild.textContent = "The bot is busy: " + n + " run" + (n === 1 ? " was" : "s were") +
      " sampled out, some of which this filter may have shown (failed runs are always shown)";
    return tr;
  }
  function flush() {
    scheduled = false;
    var empty = body.querySelector("tr.empty");
    if (empty) { empty.remove(); }
    var fragment = document.createDocumentFragment();
    var rows = waiting.splice(0, waiting.length).slice(-MAX_ROWS);
    for (var i = rows.length - 1; i >= 0; i--) { fragment.appendChild(rows[i]); }
    body.insertBefore(fragment, body.firstChild);
    while (body.rows.length > MAX_ROWS) { body.deleteRow(body.rows.length - 1); }
  }
  function add(tr) {
    waiting.push(tr);
    // a hidden tab runs no animation frame: keep only what a flush would show
    if (waiting.length > 2 * MAX_ROWS) { waiting.splice(0, waiting.length - MAX_ROWS); }
    if (!scheduled) {
      scheduled = true;
      window.requestAnimationFrame(flush);
    }
  }
  var source = new EventSource(status.getAttribute("data-stream"), {withCredentials: true});
  source.onopen = function () { status.textContent = "Following new runs as they happen (newest first)."; };
  source.onerror = function () { status.textContent = "Connection lost; reconnecting…"; };
  source.onmessage = function (event) {
    try { add(runRow(JSON.parse(event.data))); } catch (e) { /* a malformed event: skip it */ }
  };
  source.addEventListener("skipped", function (event) {
    var n = parseInt(event.data, 10);
    if (n > 0) { add(skippedRow(n)); }
  });
  source.addEventListener("sampled", function (event) {
    var n = parseInt(event.data, 10);
    if (n > 0) { add(sampledRow(n)); }
  });
  window.addEventListener("beforeunload", function () { source.close(); });
})();
