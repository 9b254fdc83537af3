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
