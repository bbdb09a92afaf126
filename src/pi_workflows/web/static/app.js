// pi-workflows ui: the page's one script (no library, no build step).
// - A run page follows /live/runs/<id> (server-sent events) and replaces each section whose
//   key moved, so a form being filled in stays as it is while nothing about it changed; when
//   its section does change, what the person started (open details, typed values) is kept.
// - A list page follows /live/runs and fetches its own filtered page again on a change.
// - Every form gets a fresh idempotency key when it is first sent: sending the same form
//   again (a double click, a resent POST) is adopted by the server, never done twice.
"use strict";

(function () {
  const body = document.body;
  const state = document.getElementById("live-state");

  function say(text) {
    if (state && state.textContent !== text) state.textContent = text;
  }

  function newKey() {
    if (window.crypto && typeof window.crypto.randomUUID === "function") {
      return window.crypto.randomUUID();
    }
    const bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || form.method.toLowerCase() !== "post") return;
    const key = form.querySelector('input[name="key"]');
    if (key && !key.value) key.value = newKey();
    if (form.dataset.sending === "1") {
      event.preventDefault(); // sent already: the first one's answer is on its way
      return;
    }
    form.dataset.sending = "1";
    form.setAttribute("aria-busy", "true");
  });

  // What a person has started in a section survives the section being drawn again: each
  // open <details> stays open, and a form with a field changed from its default keeps every
  // value it had, hidden ones included, so a change number it carries stays the one the
  // person wrote against (the server then refuses it with the current one, never applies a
  // patch to settings the person did not see).
  function formKey(form, index) {
    return form.getAttribute("aria-label") || form.getAttribute("action") || String(index);
  }

  function started(form) {
    for (const field of form.elements) {
      if (field.type === "hidden" || field.type === "submit") continue;
      if (field.type === "checkbox" || field.type === "radio") {
        if (field.checked !== field.defaultChecked) return true;
      } else if (field instanceof HTMLSelectElement) {
        for (const option of field.options) {
          if (option.selected !== option.defaultSelected) return true;
        }
      } else if ("defaultValue" in field && field.value !== field.defaultValue) {
        return true;
      }
    }
    return false;
  }

  function keepStarted(element) {
    const open = [];
    element.querySelectorAll("details").forEach((details, index) => {
      if (details.open) open.push(index);
    });
    const forms = new Map();
    element.querySelectorAll("form").forEach((form, index) => {
      if (!started(form)) return;
      const values = [];
      for (const field of form.elements) {
        if (!field.name || field.type === "submit") continue;
        values.push([field.name, field.type, field.value, field.checked]);
      }
      forms.set(formKey(form, index), values);
    });
    return { open, forms };
  }

  function restoreStarted(element, kept) {
    const all = element.querySelectorAll("details");
    for (const index of kept.open) if (all[index]) all[index].open = true;
    element.querySelectorAll("form").forEach((form, index) => {
      const values = kept.forms.get(formKey(form, index));
      if (!values) return;
      for (const [name, type, value, checked] of values) {
        for (const field of form.querySelectorAll(`[name="${CSS.escape(name)}"]`)) {
          if (type === "checkbox" || type === "radio") {
            if (field.value === value) field.checked = checked;
          } else {
            field.value = value;
          }
        }
      }
    });
  }

  function replaceSections(sections) {
    const revision = Number(sections.revision ? sections.revision.key : 0);
    if (revision < Number(body.dataset.revision || 0)) return; // older than what is shown
    body.dataset.revision = String(revision);
    for (const [name, section] of Object.entries(sections)) {
      if (name === "revision") continue;
      if (name === "title") {
        document.title = section.html + " · pi-workflows";
        continue;
      }
      const element = document.getElementById("sec-" + name);
      if (!element || element.dataset.key === section.key) continue;
      const focused = document.activeElement;
      const hadFocus = focused && element.contains(focused) && focused.id;
      const kept = keepStarted(element);
      element.innerHTML = section.html;
      element.dataset.key = section.key;
      restoreStarted(element, kept);
      if (hadFocus) {
        const again = document.getElementById(hadFocus);
        if (again) again.focus();
      }
    }
    body.dataset.updated = String(Date.now());
  }

  function follow(url, handlers) {
    const source = new EventSource(url);
    source.onopen = () => say("Live");
    source.onerror = () => say("Reconnecting… (is the server running?)");
    for (const [name, handler] of Object.entries(handlers)) {
      source.addEventListener(name, (event) => handler(JSON.parse(event.data), source));
    }
    window.addEventListener("pagehide", () => source.close());
    return source;
  }

  const runUrl = body.dataset.liveRun;
  if (runUrl) {
    follow(runUrl, {
      sections: (sections) => replaceSections(sections),
      problem: (item, source) => {
        source.close();
        say(item.problem || "This run can no longer be followed.");
      },
    });
  }

  const listUrl = body.dataset.liveList;
  if (listUrl) {
    const target = document.getElementById("list-body");
    let fetching = false;
    let again = false;
    async function refresh() {
      if (fetching) {
        again = true;
        return;
      }
      fetching = true;
      try {
        const answer = await fetch(listUrl + window.location.search, { credentials: "same-origin" });
        if (answer.ok) {
          const html = await answer.text();
          if (target && target.innerHTML.trim() !== html.trim()) target.innerHTML = html;
          body.dataset.updated = String(Date.now());
        }
      } finally {
        fetching = false;
        if (again) {
          again = false;
          refresh();
        }
      }
    }
    follow("/live/runs", { changed: () => refresh() });
  }
})();
