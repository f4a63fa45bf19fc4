// The thread page's updates: of each turn that changes, the blocks that
// changed are replaced, or grown; the controls that change are replaced as the turn goes on,
// but not what the person is editing; forms are posted in the
// background, and what happened is said under them.
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

  // What the person is editing stays as they left it: a control is
  // replaced only when the server's rendering of it changed, and never
  // while it holds the focus or is a form they changed and have not
  // sent (its parts around it are updated alone).
  const shown = new WeakMap(); // element → the server's rendering it shows
  const touched = new WeakSet(); // forms changed and not yet sent

  function keyOf(el, seen) {
    let k = el.id ? "#" + el.id
      : el.dataset.ask ? "ask:" + el.dataset.ask
      : el.dataset.command ? "choice:" + el.dataset.command + ":" + (el.dataset.option || "")
      : el.dataset.key ? "key:" + el.dataset.key
      : el.tagName + "." + el.className;
    const n = (seen.get(k) || 0) + 1;
    seen.set(k, n);
    return n > 1 ? k + "/" + n : k;
  }

  // changed reports whether a form's fields differ from what the page
  // gave them: an edit made before this script ran, or one no event told.
  function changed(form) {
    for (const f of form.elements) {
      if (f.tagName === "SELECT") {
        for (const o of f.options) if (o.selected !== o.defaultSelected) return true;
      } else if (f.type === "checkbox" || f.type === "radio") {
        if (f.checked !== f.defaultChecked) return true;
      } else if ("defaultValue" in f && f.value !== f.defaultValue) {
        return true;
      }
    }
    return false;
  }

  function edited(form) { return touched.has(form) || changed(form); }

  function busy(el) {
    const f = document.activeElement;
    if (f && f !== document.body && el.contains(f)) return true;
    if (el.tagName === "FORM") return edited(el);
    for (const form of el.querySelectorAll("form")) if (edited(form)) return true;
    return false;
  }

  function merge(parent, fresh) {
    const old = new Map();
    const seenOld = new Map();
    for (const el of parent.children) old.set(keyOf(el, seenOld), el);
    const out = [];
    const seenNew = new Map();
    for (const el of Array.from(fresh.children)) {
      const html = el.outerHTML;
      const was = old.get(keyOf(el, seenNew));
      if (was && shown.get(was) === html) {
        out.push(was);
      } else if (was && busy(was)) {
        if (was.tagName !== "FORM" && was.tagName === el.tagName) merge(was, el);
        out.push(was);
      } else {
        shown.set(el, html);
        out.push(el);
      }
    }
    const keep = new Set(out);
    for (const el of Array.from(parent.children)) if (!keep.has(el)) el.remove();
    out.forEach(function (el, i) {
      const at = parent.children[i];
      if (at !== el) parent.insertBefore(el, at || null);
    });
  }

  for (const ev of ["input", "change"]) {
    document.addEventListener(ev, function (e) {
      const form = e.target.form;
      if (form && main.contains(form)) touched.add(form);
    });
  }

  // The source of each turn's blocks as the server sent them (by turn,
  // by block), for the events that keep a block's start and send the
  // rest: a turn the page was made with has none until it is sent whole.
  const sources = new Map();

  // A details element the person opened stays open when its block is
  // replaced.
  function carryOpen(was, el) {
    const open = Array.from(was.querySelectorAll("details"), function (d) { return d.open; });
    Array.from(el.querySelectorAll("details")).forEach(function (d, i) { if (open[i]) d.open = true; });
  }

  // applyTurn applies a "turn" event (see turnEvent in web/rendered.go);
  // false if it is from a version of the turn the page does not hold.
  function applyTurn(d) {
    let section = document.getElementById("turn-" + d.seq);
    const had = d.from && section && section.dataset.version === String(d.from) ? sources.get(d.seq) : null;
    if (d.from && !had) return false;
    const article = section && section.querySelector(":scope > article");
    const shownNow = new Map();
    if (article) for (const el of article.children) if (el.dataset.block) shownNow.set(el.dataset.block, el);
    const src = new Map();
    const els = [];
    for (const b of d.blocks) {
      const was = shownNow.get(b.id);
      let s;
      if (b.html === undefined) {
        s = had && had.get(b.id);
        if (s === undefined || !was) return false;
        els.push(was);
      } else {
        if (b.keep) {
          const o = had && had.get(b.id);
          if (o === undefined || o.length < b.keep) return false;
          s = o.slice(0, b.keep) + b.html;
        } else {
          s = b.html;
        }
        const el = fragment(s).firstElementChild;
        if (was) carryOpen(was, el);
        els.push(el);
      }
      src.set(b.id, s);
    }
    if (!section) {
      section = document.createElement("section");
      section.className = "turn";
      section.id = "turn-" + d.seq;
      section.dataset.turn = d.seq;
      document.getElementById("turns").appendChild(section);
    }
    const art = document.createElement("article");
    art.className = d.class;
    art.append(...els);
    if (article) article.replaceWith(art);
    else section.replaceChildren(art);
    section.dataset.version = d.version;
    sources.set(d.seq, src);
    return true;
  }

  function watch() {
    const es = new EventSource(main.dataset.events + "?have=" + encodeURIComponent(have()));
    es.addEventListener("turn", function (e) {
      if (applyTurn(JSON.parse(e.data))) return;
      // An update the page missed: watch again, to be sent the turn whole.
      es.close();
      watch();
    });
    es.addEventListener("controls", function (e) {
      const d = JSON.parse(e.data);
      merge(document.getElementById("controls"), fragment(d.html));
    });
    es.addEventListener("gone", function () { es.close(); });
  }

  document.addEventListener("submit", function (e) {
    const form = e.target;
    if (!main.contains(form)) return;
    e.preventDefault();
    touched.delete(form);
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
