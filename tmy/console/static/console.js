/* The console's shared script: CSRF for fetch() and forms, confirmations.
   Pages work without it (forms carry their csrf field); live views build on tmyConsole. */
(function () {
  "use strict";
  function meta(name) {
    var tag = document.querySelector('meta[name="' + name + '"]');
    return tag ? tag.getAttribute("content") : "";
  }
  var api = {
    csrf: function () { return meta("csrf-token"); },
    path: function () { return meta("console-path"); },
    /* a console URL: tmyConsole.url("live/stream") */
    url: function (sub) { return meta("console-path") + "/" + (sub || ""); },
    /* GET a page's data (?format=json) */
    get: function (sub) {
      var sep = sub.indexOf("?") < 0 ? "?" : "&";
      return fetch(api.url(sub) + sep + "format=json", {credentials: "same-origin"})
        .then(function (r) { return r.json(); });
    },
    /* POST JSON with the CSRF header; resolves to the Response */
    post: function (sub, body) {
      return fetch(api.url(sub), {
        method: "POST",
        credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRF-Token": api.csrf()},
        body: JSON.stringify(body || {})
      });
    }
  };
  window.tmyConsole = api;
  document.addEventListener("DOMContentLoaded", function () {
    var token = api.csrf();
    document.querySelectorAll('form[method="post"], form[method="POST"]').forEach(function (form) {
      if (token && !form.querySelector('input[name="csrf"]')) {
        var input = document.createElement("input");
        input.type = "hidden";
        input.name = "csrf";
        input.value = token;
        form.appendChild(input);
      }
    });
  });
  /* <form data-confirm="Delete it?"> / <button data-confirm="…">: ask first */
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var button = event.submitter;
    var ask = (button && button.getAttribute("data-confirm")) || form.getAttribute("data-confirm");
    if (ask && !window.confirm(ask)) { event.preventDefault(); }
  });
})();
