// The thread page's updates: each turn that changes replaces its
// section; the controls are replaced as the turn goes on; forms are
// posted in the background, and what happened is said under them.
"use strict";

(function () {
  const main = document.getElementById("thread");
  if (!main) return;

  function have() {
    const out = [];
    for (const s of document.querySelectorAll("#turns > .turn")) {
      out.push(s.dataset.turn + "." + s.dataset.version);
    }
    return out.join(",");
  }

  function fragment(html) {
    const t = document.createElement("template");
    t.innerHTML = html; // the server's own rendering: every text in it is escaped there
    return t.content;
  }

  function watch() {
    const es = new EventSource(main.dataset.events + "?have=" + encodeURIComponent(have()));
    es.addEventListener("turn", function (e) {
      const d = JSON.parse(e.data);
      const node = fragment(d.html).firstElementChild;
      const old = document.getElementById("turn-" + d.seq);
      if (old) old.replaceWith(node);
      else document.getElementById("turns").appendChild(node);
    });
    es.addEventListener("controls", function (e) {
      const d = JSON.parse(e.data);
      const c = document.getElementById("controls");
      const typed = document.getElementById("message");
      const keep = typed ? typed.value : "";
      c.replaceChildren(fragment(d.html));
      const again = document.getElementById("message");
      if (again) again.value = keep;
    });
    es.addEventListener("gone", function () { es.close(); });
  }

  document.addEventListener("submit", function (e) {
    const form = e.target;
    if (!main.contains(form)) return;
    e.preventDefault();
    const body = new URLSearchParams(new FormData(form, e.submitter));
    fetch(form.action, { method: "POST", body: body, headers: { "Accept": "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.json().catch(function () { return { message: r.statusText }; }); })
      .then(function (d) {
        document.getElementById("said").textContent = d.message || "";
        if (form.id === "send-form" && d.message === "Sent.") form.reset();
      });
  });

  watch();
})();
