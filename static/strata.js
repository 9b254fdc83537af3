// Strata's own script, progressive enhancement only (every page works without it).
// A text field with data-counter and maxlength shows how much of its limit is used, as you type;
// the server enforces the same limit (workflows.actions.workflows.MAX_REASON).
(function () {
  "use strict";

  function grouped(n) {  // 2,000 whatever the browser's locale
    return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }

  function attach(field) {
    if (field.dataset.counterReady) return;
    field.dataset.counterReady = "1";
    var max = parseInt(field.getAttribute("maxlength"), 10);
    var out = document.createElement("small");
    out.className = "age counter";
    out.setAttribute("aria-live", "polite");
    if (field.id) out.id = field.id + "-counter";
    field.insertAdjacentElement("afterend", out);
    function update() {
      var n = field.value.length;
      out.textContent = grouped(n) + " / " + grouped(max) + " characters";
      out.classList.toggle("near-limit", n >= max * 0.9);
    }
    field.addEventListener("input", update);
    update();
  }

  function scan(root) {
    if (!root || !root.querySelectorAll) return;
    root.querySelectorAll("[data-counter][maxlength]").forEach(attach);
  }

  document.addEventListener("DOMContentLoaded", function () { scan(document); });
  document.addEventListener("htmx:load", function (event) { scan(event.target); });
})();

// An htmx request that fails says so where its answer would have gone, instead of leaving the
// previous answer as if it were this one's (htmx swaps nothing for an error status, and nothing
// when the server does not answer). A request someone made (a lookup, a filter, a panel's first
// load) has its target replaced by the message; a live panel's poll keeps its last data, which
// says how old it is, under the message. The next answer that arrives replaces the message.
(function () {
  "use strict";

  function serverMessage(xhr) {  // the JSON API's {"error", "message"}, when that is the answer
    try { return JSON.parse(xhr.responseText).message || ""; } catch (e) { return ""; }
  }

  function failureText(kind, xhr) {
    if (kind === "send") return "Strata did not answer (the server or the network is down); nothing was updated. Try again.";
    if (kind === "timeout") return "Strata took too long to answer; nothing was updated. Try again.";
    var status = xhr.status;
    var said = serverMessage(xhr);
    if (status === 413 || status === 414 || status === 431 || /too large/i.test(xhr.responseText || "")) {
      return "What you typed is too long for the server (HTTP " + status + "). Shorten it and try again.";
    }
    if (status >= 500) {
      return "Strata failed to answer (HTTP " + status + "); the error is logged. Try again, or tell your Strata administrator.";
    }
    return "The request failed (HTTP " + status + ")" + (said ? ": " + said : ".");
  }

  function polled(elt) {
    return /\bevery\b/.test((elt && elt.getAttribute && elt.getAttribute("hx-trigger")) || "");
  }

  function show(kind) {
    return function (event) {
      var detail = event.detail || {};
      var target = detail.target;
      if (!target || !document.body.contains(target)) return;
      var note = document.createElement("p");
      note.className = "error request-failed";
      note.setAttribute("role", "alert");
      note.textContent = failureText(kind, detail.xhr || {});
      if (polled(event.target)) {
        var old = target.querySelector(":scope > .request-failed");
        if (old) old.remove();
        target.insertBefore(note, target.firstChild);
      } else {
        target.replaceChildren(note);
      }
    };
  }

  document.addEventListener("htmx:responseError", show("status"));
  document.addEventListener("htmx:sendError", show("send"));
  document.addEventListener("htmx:timeout", show("timeout"));
})();

// The request form: "Request" sends the parameters that were checked (hidden fields of the
// preview), not what the parameters form shows now. Once a parameter is edited after the check,
// the preview says it is out of date and "Request" waits for "Check request" again, so a changed
// policy can never be submitted as the old one.
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    var form = document.querySelector("form[data-params-form]");
    var preview = document.querySelector("[data-preview]");
    if (!form || !preview) return;
    function stale() {
      preview.classList.add("stale");
      var note = preview.querySelector("[data-stale-note]");
      if (note) note.hidden = false;
      preview.querySelectorAll("[data-testid=submit-request]").forEach(function (b) {
        b.disabled = true;
      });
    }
    form.addEventListener("input", stale);
    form.addEventListener("change", stale);
  });
})();
