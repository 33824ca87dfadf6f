// memstream's web view: every view reads queryd's public HTTP API (fetch) and nothing else.
// The URL holds the view, the seq and the filters, so a link shows what its sender saw.
// Log content is only ever put into the page as text (textContent), never as markup.
"use strict";

(function () {
  const app = document.getElementById("app");
  const LOG = app.dataset.log;
  const API = "/logs/" + encodeURIComponent(LOG);
  const UI = "/ui/logs/" + encodeURIComponent(LOG);
  const KINDS = ["message", "document", "recall", "deletion", "erasure"];
  const VIEWS = ["timeline", "state", "recall", "deletions", "graph", "diff", "plots"];
  const PAGE = 100;
  const COLORS = { message: "#0550ae", document: "#116329", recall: "#8250df", deletion: "#bf8700", erasure: "#cf222e" };
  const view = document.getElementById("view");
  const problem = document.getElementById("problem");
  const slider = document.getElementById("seq-slider");
  const seqBox = document.getElementById("seq-box");
  const seqStatus = document.getElementById("seq-status");
  const liveBox = document.getElementById("live");
  const liveStatus = document.getElementById("live-status");
  let head = null; // the newest seq the daemon answered with
  let rendering = 0; // the render in progress (a newer one supersedes it)

  // --- small helpers ------------------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = value;
      else if (key === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  const svgNS = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(svgNS, tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "text") node.textContent = value;
      else node.setAttribute(key, String(value));
    }
    for (const child of children.flat()) if (child) node.append(child);
    return node;
  }

  class ApiProblem extends Error {}

  // One place every request goes through: same-origin credentials, so that when queryd
  // checks who is asking, the page asks as its user.
  async function api(path, params, body) {
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries(params || {})) {
      if (value !== null && value !== undefined && value !== "") query.set(key, value);
    }
    const url = API + path + (query.toString() ? "?" + query : "");
    let answer;
    try {
      answer = await fetch(url, {
        method: body === undefined ? "GET" : "POST",
        credentials: "same-origin",
        headers: body === undefined ? { Accept: "application/json" } : { Accept: "application/json", "Content-Type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (err) {
      throw new ApiProblem("queryd did not answer (" + url + "): is it running?");
    }
    let data = null;
    try { data = await answer.json(); } catch (err) { data = null; }
    if (!answer.ok) {
      const message = data && typeof data.message === "string" ? data.message : "HTTP " + answer.status;
      throw new ApiProblem(message);
    }
    if (data && typeof data.seq === "number" && (head === null || data.seq > head)) setHead(data.seq);
    return data;
  }

  function params() { return new URLSearchParams(location.search); }

  function go(changes, push) {
    const p = params();
    for (const [key, value] of Object.entries(changes)) {
      if (value === null || value === undefined || value === "") p.delete(key);
      else p.set(key, String(value));
    }
    const url = location.pathname + (p.toString() ? "?" + p : "");
    if (push === false) history.replaceState(null, "", url);
    else history.pushState(null, "", url);
    render();
  }

  function showProblem(message) {
    problem.textContent = message;
    problem.hidden = !message;
  }

  // An integer URL parameter: null when absent; a problem naming it when malformed.
  function intParam(p, name, low) {
    const raw = p.get(name);
    if (raw === null || raw.trim() === "") return null;
    if (!/^-?\d+$/.test(raw.trim())) throw new ApiProblem(name + ": expected an integer, got " + JSON.stringify(raw.slice(0, 40)));
    const value = Number(raw.trim());
    if (value < low || !Number.isSafeInteger(value)) throw new ApiProblem(name + ": expected an integer of at least " + low + ", got " + raw.slice(0, 40));
    return value;
  }

  // The seq the view is pinned to (null: the head), checked against the head.
  function pinnedSeq(p) {
    const seq = intParam(p, "seq", -1);
    if (seq !== null && head !== null && seq > head) throw new ApiProblem("seq: " + seq + " is past the log's head (" + head + ")");
    return seq;
  }

  function when(stamp) { return stamp ? stamp.replace("T", " ").replace(/\.\d+/, "").replace("Z", "") : ""; }
  function short(id) { return String(id).slice(0, 8); }
  function said(event) {
    if (!event) return "";
    if (event.kind === "message") return event.speaker + ": " + event.content;
    if (event.kind === "document") return event.name + ": " + event.text;
    if (event.kind === "recall") return "recall " + JSON.stringify(event.query) + " → " + event.recalled.length + " item(s)";
    if (event.kind === "deletion") return "deleted " + event.targets.length + " item(s): " + event.reason;
    if (event.kind === "erasure") return "erased " + event.erased.length + " item(s) of subject " + event.subject + ": " + event.reason;
    return "";
  }
  function clip(text, n) { return text.length > n ? text.slice(0, n - 1) + "…" : text; }
  function eventLink(id, label) { return el("a", { href: UI + "/events/" + encodeURIComponent(id) }, label); }
  function erasedNote(erasure) {
    return el("span", { class: "deleted erased" }, "erased at seq " + erasure.seq + ": " + erasure.reason + (erasure.requested_by ? " (requested by " + erasure.requested_by + ")" : "") + "; its content is unreadable");
  }
  // what a view shows of a Shown item: its words, or why there are none
  function shownText(s, n) {
    if (!s.event) return deletedNote(s.deletion);
    return s.erasure ? erasedNote(s.erasure) : clip(said(s.event), n);
  }
  function deletedNote(deletion) {
    return el("span", { class: "deleted" }, "deleted at seq " + deletion.seq + ": " + deletion.reason + (deletion.requested_by ? " (requested by " + deletion.requested_by + ")" : ""));
  }
  // a colour square (through the CSSOM: the page's CSP refuses inline style attributes)
  function swatch(color) {
    const node = el("span", { class: "swatch" });
    node.style.background = color;
    return node;
  }
  function table(headers, rows, cls) {
    return el("table", { class: "grid " + (cls || "") },
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, rows));
  }

  // --- the seq bar ----------------------------------------------------------------------------

  function setHead(seq) {
    head = seq;
    slider.max = String(Math.max(seq, 0));
    seqBox.max = String(seq);
    syncSeqBar();
  }
  function syncSeqBar() {
    let seq = null;
    try { seq = intParam(params(), "seq", -1); } catch (err) { seq = null; }
    const shown = seq === null ? head : seq;
    if (shown !== null) { slider.value = String(shown); seqBox.value = String(shown); }
    seqStatus.textContent = head === null ? "" : seq === null ? "at the head (seq " + head + ")" : "as of seq " + seq + " of " + head;
  }
  let slideTimer = null;
  slider.addEventListener("input", () => {
    seqBox.value = slider.value;
    clearTimeout(slideTimer);
    slideTimer = setTimeout(() => go({ seq: slider.value, after: null, before: null }, false), 120);
  });
  slider.addEventListener("change", () => go({ seq: slider.value, after: null, before: null }));
  seqBox.addEventListener("change", () => go({ seq: seqBox.value.trim(), after: null, before: null }));
  document.getElementById("seq-head").addEventListener("click", () => go({ seq: null, after: null, before: null }));
  window.addEventListener("popstate", render);
  document.getElementById("tabs").addEventListener("click", (ev) => {
    const link = ev.target.closest("a[data-view]");
    if (!link) return;
    ev.preventDefault();
    go({ view: link.dataset.view, after: null, before: null });
  });

  // --- live: the lifecycle stream (server-sent events) ------------------------------------------

  let liveAbort = null;
  let liveNew = 0;
  let liveRefresh = null;
  async function follow() {
    if (liveAbort) liveAbort.abort();
    if (!liveBox.checked) { liveStatus.textContent = ""; return; }
    const controller = new AbortController();
    liveAbort = controller;
    let lastId = null;
    while (!controller.signal.aborted) {
      const since = head === null ? -1 : head;
      try {
        const headers = { Accept: "text/event-stream" };
        if (lastId !== null) headers["Last-Event-ID"] = lastId;
        const answer = await fetch(API + "/lifecycle?after_seq=" + since, { credentials: "same-origin", headers, signal: controller.signal });
        if (!answer.ok) throw new Error("HTTP " + answer.status);
        liveStatus.textContent = "live";
        const reader = answer.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const frame = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            let data = null;
            for (const line of frame.split("\n")) {
              if (line.startsWith("id: ")) lastId = line.slice(4);
              if (line.startsWith("data: ")) { try { data = JSON.parse(line.slice(6)); } catch (err) { data = null; } }
            }
            if (data && typeof data.seq === "number" && (head === null || data.seq > head)) onLive(data.seq);
          }
        }
      } catch (err) {
        if (controller.signal.aborted) return;
        liveStatus.textContent = "live: reconnecting";
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
  function onLive(seq) {
    liveNew += 1;
    setHead(seq);
    liveStatus.textContent = "live: " + liveNew + " new";
    const p = params();
    // A view pinned to a seq stays where it is; one at the head follows what comes.
    if (p.get("seq") || p.get("after") || (p.get("before") && p.get("view") !== "timeline")) return;
    clearTimeout(liveRefresh);
    liveRefresh = setTimeout(() => render({ live: true }), 150);
  }
  liveBox.addEventListener("change", follow);

  // --- the views ----------------------------------------------------------------------------

  // Content deleted at the head is never shown as text, even as of a seq before its
  // deletion: the ids deleted at the head among the first `limit` content events (the
  // pages of /state are keyed by content seq, so this page covers the as-of page).
  async function deletedAtHead(seq, limit) {
    if (seq === null) return new Map();
    const newest = await api("/state", { limit });
    return new Map(newest.deleted.map((d) => [d.id, d.tombstone.seq]));
  }

  async function render(options) {
    const ticket = ++rendering;
    const p = params();
    const name = p.get("view") || "timeline";
    for (const link of document.querySelectorAll("#tabs a")) {
      if (link.dataset.view === name) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
      const q = new URLSearchParams(p); q.set("view", link.dataset.view); q.delete("after"); q.delete("before");
      link.href = "?" + q;
    }
    syncSeqBar();
    try {
      if (!VIEWS.includes(name)) throw new ApiProblem("view: expected one of " + VIEWS.join(", ") + ", got " + JSON.stringify(name.slice(0, 40)));
      if (head === null) {
        const info = await api("", {});
        if (info.seq !== null) setHead(info.seq); else { head = -1; setHead(-1); }
      }
      const seq = pinnedSeq(p);
      const content = await RENDER[name](p, seq, options || {});
      if (ticket !== rendering) return;
      showProblem("");
      view.replaceChildren(content);
      document.title = name + " · " + LOG + " · memstream";
    } catch (err) {
      if (ticket !== rendering) return;
      showProblem(err instanceof ApiProblem ? err.message : "this view failed: " + (err && err.message ? err.message : String(err)));
      view.replaceChildren();
    }
  }

  const RENDER = {
    timeline: async function (p, seq, options) {
      const kind = p.get("kind") || "";
      if (kind && !KINDS.includes(kind)) throw new ApiProblem("kind: expected one of " + KINDS.join(", ") + ", got " + JSON.stringify(kind.slice(0, 40)));
      const after = intParam(p, "after", -1);
      let before = intParam(p, "before", 0);
      if (after === null && before === null) before = (seq === null ? head : seq) + 1;
      const filters = { kind, actor: p.get("actor") || "", session_id: p.get("session") || "", text: p.get("text") || "" };
      const data = await api("/events", { ...filters, after_seq: after, before_seq: after === null ? before : null, up_to_seq: seq, limit: PAGE });
      const form = el("form", { class: "filters", on: { submit: (ev) => {
        ev.preventDefault();
        const f = new FormData(ev.target);
        go({ kind: f.get("kind"), actor: f.get("actor"), session: f.get("session"), text: f.get("text"), after: null, before: null });
      } } },
      el("label", {}, "kind", el("select", { name: "kind" }, el("option", { value: "" }, "any"), KINDS.map((k) => el("option", { value: k, selected: k === kind }, k)))),
      el("label", {}, "actor", el("input", { name: "actor", value: filters.actor })),
      el("label", {}, "session", el("input", { name: "session", value: filters.session_id })),
      el("label", {}, "text", el("input", { name: "text", value: filters.text, type: "search" })),
      el("button", { type: "submit" }, "Filter"));
      const pager = el("nav", { class: "pager", "aria-label": "pages" },
        data.prev_before_seq !== null ? el("button", { type: "button", id: "older", on: { click: () => go({ before: data.prev_before_seq, after: null }) } }, "← older") : null,
        data.next_after_seq !== null ? el("button", { type: "button", id: "newer", on: { click: () => go({ after: data.next_after_seq, before: null }) } }, "newer →") : null,
        el("button", { type: "button", id: "newest", on: { click: () => go({ after: null, before: null }) } }, "newest"),
        el("a", { href: UI + "/timeline?" + new URLSearchParams({ ...(kind ? { kind } : {}), ...(seq !== null ? { seq } : {}) }) }, "plain HTML"));
      const rows = data.events.map((e) => {
        const deletedAt = data.deleted_at[e.id];
        const erasedAt = (data.erased_at || {})[e.id];
        const what = deletedAt !== undefined
          ? el("span", { class: "deleted" }, "deleted at seq " + deletedAt + (seq !== null && deletedAt > seq ? ", later" : "") + " (content not shown)")
          : erasedAt !== undefined
            ? el("span", { class: "deleted erased" }, "erased at seq " + erasedAt + (seq !== null && erasedAt > seq ? ", later" : "") + " (content unreadable)")
            : clip(said(e), 200);
        return el("tr", { class: "kind-" + e.kind + (options.live ? " new-row" : ""), "data-seq": e.seq },
          el("td", { class: "num" }, eventLink(e.id, String(e.seq))),
          el("td", {}, when(e.timestamp)), el("td", {}, e.kind), el("td", {}, e.actor || ""), el("td", {}, e.session_id || ""),
          el("td", {}, what, e.kind === "recall" ? [" ", el("a", { href: "?" + new URLSearchParams({ view: "recall", recall: e.id }), class: "saw" }, "what the model saw")] : null));
      });
      const body = el("div", {}, form, pager,
        rows.length ? table(["seq", "time (UTC)", "kind", "actor", "session", "what"], rows, "timeline") : el("p", { id: "empty" }, "No event matches."));
      if (!window.__timelinePaintMs) {
        // the first paint of the timeline, from navigation start (read by the browser test)
        requestAnimationFrame(() => { window.__timelinePaintMs = performance.now(); });
      }
      return body;
    },

    state: async function (p, seq) {
      const [info, state, later] = await Promise.all([api("", {}), api("/state", { up_to_seq: seq, limit: 500 }), deletedAtHead(seq, 500)]);
      const stats = new Map(state.recall_stats.map((r) => [r.id, r.num_recalled]));
      const rows = (events) => events.map((e) => el("tr", {},
        el("td", { class: "num" }, eventLink(e.id, String(e.seq))), el("td", {}, e.kind),
        el("td", {}, later.has(e.id) ? el("span", { class: "deleted" }, "visible at this seq; deleted later at seq " + later.get(e.id) + " (content not shown)") : clip(said(e), 160)),
        el("td", { class: "num" }, String(stats.get(e.id) || 0))));
      return el("div", {},
        el("h2", {}, "State " + (seq === null ? "at the head" : "as of seq " + seq)),
        el("p", { id: "state-counts" }, state.visible_messages.length + " visible messages, " + state.visible_documents.length + " visible documents, " + state.deleted.length + " deleted" + (state.next_after_seq !== null ? " (first page; more follow)" : "") + " · " + info.audit_events + " audit events in the log"),
        el("h3", {}, "Visible messages"),
        table(["seq", "kind", "content", "recalled"], rows(state.visible_messages), "messages"),
        el("h3", {}, "Visible documents"),
        table(["seq", "kind", "content", "recalled"], rows(state.visible_documents), "documents"),
        el("h3", {}, "Tombstones"),
        table(["item", "deleted at seq", "reason", "requested by"], state.deleted.map((d) => el("tr", {},
          el("td", {}, eventLink(d.id, short(d.id))), el("td", { class: "num" }, String(d.tombstone.seq)),
          el("td", {}, d.tombstone.reason), el("td", {}, d.tombstone.requested_by || ""))), "tombstones"));
    },

    recall: async function (p, seq) {
      const id = p.get("recall");
      if (!id) {
        const data = await api("/events", { kind: "recall", before_seq: (seq === null ? head : seq) + 1, limit: PAGE });
        return el("div", {}, el("h2", {}, "Recalls"), el("p", {}, "Pick a Recall to see what the model saw."),
          data.events.length ? table(["seq", "time (UTC)", "actor", "session", "query", ""], data.events.reverse().map((e) => el("tr", {},
            el("td", { class: "num" }, String(e.seq)), el("td", {}, when(e.timestamp)), el("td", {}, e.actor || ""), el("td", {}, e.session_id || ""),
            el("td", {}, e.query), el("td", {}, el("a", { href: "?" + new URLSearchParams({ view: "recall", recall: e.id }), class: "saw" }, "what the model saw"))))) : el("p", {}, "No Recall in the log yet."));
      }
      if (!/^[0-9a-fA-F-]{32,36}$/.test(id)) throw new ApiProblem("recall: expected a Recall's id (a UUID), got " + JSON.stringify(id.slice(0, 40)));
      const data = await api("/recalls/" + encodeURIComponent(id) + "/context", { around: 5 });
      const r = data.recall;
      const shownRow = (s) => el("li", { class: "card" },
        s.event ? [el("div", { class: "muted" }, "seq ", eventLink(s.id, String(s.event.seq)), " · " + s.event.kind + (s.event.actor ? " · " + s.event.actor : "") + " · " + when(s.event.timestamp)), el("div", { class: "said" }, shownText(s, 1000))]
          : [el("div", { class: "muted" }, eventLink(s.id, short(s.id))), deletedNote(s.deletion), el("div", { class: "muted" }, "Its content is not shown.")]);
      return el("div", { id: "recall-view" },
        el("h2", {}, "What the model saw at seq " + r.seq),
        el("p", {}, "Query: ", el("q", { id: "recall-query" }, r.query), " · " + when(r.timestamp) + (r.actor ? " · by " + r.actor : "") + (r.session_id ? " · session " + r.session_id : "")),
        el("h3", {}, "The prompt before"), data.before.length ? el("ul", { class: "plain", id: "recall-before" }, data.before.map(shownRow)) : el("p", { class: "muted" }, "No message of this session before it."),
        el("h3", {}, "The items it named (" + data.items.length + ")"), el("ol", { id: "recall-items" }, data.items.map(shownRow)),
        el("h3", {}, "The answer after"), data.after.length ? el("ul", { class: "plain", id: "recall-after" }, data.after.map(shownRow)) : el("p", { class: "muted" }, "No message of this session after it."));
    },

    deletions: async function (p, seq) {
      const upTo = (seq === null ? head : seq) + 1;
      const [data, erasures] = await Promise.all([api("/events", { kind: "deletion", before_seq: upTo, limit: PAGE }), api("/events", { kind: "erasure", before_seq: upTo, limit: PAGE })]);
      const erasureRows = erasures.events.reverse().map((x) => el("tr", {},
        el("td", { class: "num" }, eventLink(x.id, String(x.seq))), el("td", {}, when(x.timestamp)), el("td", {}, x.subject), el("td", {}, x.reason),
        el("td", {}, x.requested_by || ""), el("td", {}, x.actor || ""),
        el("td", {}, x.erased.map((t, i) => [i ? ", " : "", eventLink(t, short(t))]))));
      const rows = data.events.reverse().map((d) => el("tr", {},
        el("td", { class: "num" }, eventLink(d.id, String(d.seq))), el("td", {}, when(d.timestamp)), el("td", {}, d.reason),
        el("td", {}, d.requested_by || ""), el("td", {}, d.actor || ""),
        el("td", {}, d.targets.map((t, i) => [i ? ", " : "", eventLink(t, short(t))]))));
      return el("div", {}, el("h2", {}, "Deletions" + (seq === null ? "" : " up to seq " + seq)),
        rows.length ? table(["seq", "time (UTC)", "reason", "requested by", "actor", "targets"], rows, "deletions") : el("p", {}, "No deletion."),
        el("h2", {}, "Erasures" + (seq === null ? "" : " up to seq " + seq)),
        el("p", { class: "muted" }, "An erasure destroys a data subject's key: the events it names stay in the log (and in every proof) as ciphertext no one can read."),
        erasureRows.length ? table(["seq", "time (UTC)", "subject", "reason", "requested by", "actor", "erased"], erasureRows, "erasures") : el("p", {}, "No erasure."));
    },

    graph: async function (p, seq) {
      const [scored, contradictions, stale, intents, tasks] = await Promise.all([
        api("/graph/scored", {}, { weights: { authority: 1 }, options: { limit: 50 } }),
        api("/graph/contradictions", { limit: 50 }), api("/graph/stale", { limit: 50 }),
        api("/graph/intents/query", {}, {}), api("/graph/tasks/query", {}, {})]);
      const itemText = (item) => clip(typeof item.content.text === "string" ? item.content.text : JSON.stringify(item.content), 80);
      const focus = p.get("item") || (scored.items[0] ? scored.items[0].item.id : null);
      const out = el("div", {});
      if (seq !== null) out.append(el("p", { class: "muted" }, "queryd serves the graph at the head only: this view is the graph at seq " + scored.seq + ", not as of seq " + seq + "."));
      out.append(el("h2", {}, "Items by score"),
        scored.items.length ? table(["item", "kind", "score", "authority", "content"], scored.items.map((s) => el("tr", {},
          el("td", {}, el("a", { href: "?" + new URLSearchParams({ view: "graph", item: s.item.id }) }, s.item.id)), el("td", {}, s.item.kind),
          el("td", { class: "num" }, s.score.toFixed(3)), el("td", { class: "num" }, String(s.item.authority)), el("td", {}, itemText(s.item)))), "items") : el("p", {}, "No memory item."));
      if (focus) {
        const [tree, deps] = await Promise.all([api("/graph/items/" + encodeURIComponent(focus) + "/support_tree", {}), api("/graph/items/" + encodeURIComponent(focus) + "/dependents", { transitive: true })]);
        out.append(el("h2", {}, "Provenance of " + focus), drawGraph(focus, tree.nodes, deps.items));
      }
      out.append(el("h2", {}, "Contradictions"), contradictions.contradictions.length ? el("div", {}, contradictions.contradictions.map((c) => el("div", { class: "cols card" },
        el("div", {}, el("strong", {}, c.a.id), el("div", { class: "said" }, itemText(c.a))), el("div", {}, el("strong", {}, c.b.id), el("div", { class: "said" }, itemText(c.b)))))) : el("p", {}, "None."));
      out.append(el("h2", {}, "Stale items"), stale.stale.length ? table(["item", "missing parents"], stale.stale.map((s) => el("tr", {}, el("td", {}, s.item.id), el("td", {}, s.missing_parents.join(", "))))) : el("p", {}, "None."));
      out.append(el("h2", {}, "Intents"), intents.intents.length ? table(["intent", "label", "status", "priority", "owner"], intents.intents.map((i) => el("tr", {}, el("td", {}, i.id), el("td", {}, i.label), el("td", {}, i.status), el("td", { class: "num" }, String(i.priority)), el("td", {}, i.owner)))) : el("p", {}, "None."));
      out.append(el("h2", {}, "Tasks"), tasks.tasks.length ? table(["task", "intent", "action", "status", "priority"], tasks.tasks.map((t) => el("tr", {}, el("td", {}, t.id), el("td", {}, t.intent_id), el("td", {}, t.action), el("td", {}, t.status), el("td", { class: "num" }, String(t.priority))))) : el("p", {}, "None."));
      return out;
    },

    diff: async function (p, seq) {
      const to = intParam(p, "to", -1) ?? (seq === null ? head : seq);
      const from = intParam(p, "from", -1) ?? Math.max(-1, to - 10);
      const data = await api("/diff", { from_seq: from, to_seq: to, limit: 500 });
      const form = el("form", { class: "filters", on: { submit: (ev) => { ev.preventDefault(); const f = new FormData(ev.target); go({ from: f.get("from"), to: f.get("to") }); } } },
        el("label", {}, "from seq", el("input", { name: "from", type: "number", min: -1, value: from })),
        el("label", {}, "to seq", el("input", { name: "to", type: "number", min: -1, value: to })),
        el("button", { type: "submit" }, "Compare"));
      return el("div", {}, el("h2", {}, "What changed from seq " + from + " to seq " + to), form,
        el("h3", {}, "Appeared (" + data.appeared.length + ")"),
        data.appeared.length ? table(["item", "content"], data.appeared.map((s) => el("tr", {}, el("td", {}, eventLink(s.id, s.event ? "seq " + s.event.seq : short(s.id))), el("td", {}, shownText(s, 160)))), "appeared") : el("p", {}, "Nothing."),
        el("h3", {}, "Deleted (" + data.deleted.length + ")"),
        data.deleted.length ? table(["item", "deleted at seq", "reason", "requested by"], data.deleted.map((d) => el("tr", {}, el("td", {}, eventLink(d.id, short(d.id))), el("td", { class: "num" }, String(d.deletion.seq)), el("td", {}, d.deletion.reason), el("td", {}, d.deletion.requested_by || ""))), "deleted") : el("p", {}, "Nothing."),
        el("h3", {}, "Recalled (" + data.recalls.length + ")"),
        data.recalls.length ? table(["item", "times recalled before", "after"], data.recalls.map((r) => el("tr", {}, el("td", {}, eventLink(r.id, short(r.id))), el("td", { class: "num" }, String(r.before)), el("td", { class: "num" }, String(r.after)))), "recalled") : el("p", {}, "Nothing."),
        data.truncated ? el("p", { class: "muted" }, "Lists cut at 500 entries.") : null);
    },

    plots: async function (p, seq) {
      const [activity, state, later] = await Promise.all([api("/activity", { up_to_seq: seq }), api("/state", { up_to_seq: seq, limit: 10000 }), deletedAtHead(seq, 10000)]);
      const labels = new Map();
      for (const e of state.visible_messages.concat(state.visible_documents)) labels.set(e.id, "seq " + e.seq + ": " + (later.has(e.id) ? "(deleted later)" : clip(said(e), 40)));
      for (const d of state.deleted) labels.set(d.id, short(d.id) + " (deleted)");
      const top = state.recall_stats.slice().sort((a, b) => b.num_recalled - a.num_recalled).slice(0, 15);
      return el("div", {},
        el("h2", {}, "Events per " + (activity.bucket_seconds === 60 ? "minute" : activity.bucket_seconds + " s") + " by kind"),
        el("p", { class: "legend" }, KINDS.map((k) => el("span", {}, swatch(COLORS[k]), k))),
        barsByKind(activity.buckets, activity.bucket_seconds),
        el("h2", {}, "Recalls per item (top " + top.length + ")"),
        top.length ? barsPerItem(top, labels) : el("p", {}, "Nothing was recalled."));
    },
  };

  // --- drawings (plain SVG) -----------------------------------------------------------------

  function drawGraph(focus, treeNodes, dependents) {
    // rows: ancestors by depth above, the item, its dependents below
    const depth = new Map([[focus, 0]]);
    const byId = new Map(treeNodes.map((n) => [n.item.id, n]));
    const edges = [];
    const queue = [focus];
    while (queue.length) {
      const id = queue.shift();
      const node = byId.get(id);
      if (!node) continue;
      for (const parent of node.parents) {
        edges.push([parent, id]);
        if (!depth.has(parent)) { depth.set(parent, depth.get(id) - 1); queue.push(parent); }
      }
    }
    // dependents below the item, each a row below its lowest placed parent
    const waiting = dependents.filter((d) => !depth.has(d.id));
    for (let changed = true; changed;) {
      changed = false;
      for (const d of waiting) {
        if (depth.has(d.id)) continue;
        const placed = (d.parents || []).filter((parent) => depth.has(parent) && depth.get(parent) >= 0);
        if (placed.length) { depth.set(d.id, Math.max(...placed.map((parent) => depth.get(parent))) + 1); changed = true; }
      }
    }
    for (const d of waiting) {
      if (!depth.has(d.id)) depth.set(d.id, 1);
      for (const parent of d.parents || []) if (depth.has(parent)) edges.push([parent, d.id]);
    }
    const rows = new Map();
    for (const [id, level] of depth) { if (!rows.has(level)) rows.set(level, []); rows.get(level).push(id); }
    const levels = [...rows.keys()].sort((a, b) => a - b);
    const W = 150, H = 34, GX = 24, GY = 46;
    const width = Math.max(...levels.map((l) => rows.get(l).length)) * (W + GX) + GX;
    const height = levels.length * (H + GY) + GY;
    const at = new Map();
    levels.forEach((level, row) => rows.get(level).forEach((id, col) => at.set(id, [GX + col * (W + GX), GY / 2 + row * (H + GY)])));
    const drawing = svg("svg", { width, height, viewBox: "0 0 " + width + " " + height, role: "img", id: "provenance", "aria-label": "support tree and dependents of " + focus },
      svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8c959f" }))));
    for (const [from, to] of edges) {
      if (!at.has(from) || !at.has(to)) continue;
      const [x1, y1] = at.get(from), [x2, y2] = at.get(to);
      drawing.append(svg("path", { class: "edge", d: "M" + (x1 + W / 2) + "," + (y1 + H) + " L" + (x2 + W / 2) + "," + y2 }));
    }
    for (const [id, [x, y]] of at) {
      drawing.append(svg("g", { class: "node" + (id === focus ? " focus" : "") }, svg("rect", { x, y, width: W, height: H, rx: 4 }), svg("text", { x: x + 8, y: y + 21, text: clip(id, 22) })));
    }
    return el("div", {}, drawing, el("p", { class: "muted" }, "Above: the items it rests on (its support tree); below: the items that depend on it (" + dependents.length + ")."));
  }

  function barsByKind(buckets, size) {
    if (!buckets.length) return el("p", {}, "No event.");
    // on a time axis: a bucket's bar stands at its start, empty buckets leave gaps
    const first = Date.parse(buckets[0].start), last = Date.parse(buckets[buckets.length - 1].start);
    const slots = Math.round((last - first) / (size * 1000)) + 1;
    const W = 900, H = 160, PAD = 28;
    const max = Math.max(...buckets.map((b) => KINDS.reduce((sum, k) => sum + (b.counts[k] || 0), 0)));
    const bw = (W - PAD) / slots;
    const chart = svg("svg", { width: W, height: H + 30, role: "img", id: "activity", "aria-label": "events per bucket by kind, " + buckets.length + " buckets, at most " + max });
    for (const b of buckets) {
      const x = PAD + Math.round((Date.parse(b.start) - first) / (size * 1000)) * bw;
      let y = H;
      for (const k of KINDS) {
        const h = ((b.counts[k] || 0) / max) * (H - 10);
        if (h > 0) { y -= h; chart.append(svg("rect", { x, y, width: Math.max(1, bw - 1), height: h, fill: COLORS[k] }, svg("title", { text: when(b.start) + " " + k + ": " + b.counts[k] }))); }
      }
    }
    chart.append(svg("text", { x: 0, y: 12, text: String(max) }), svg("text", { x: 0, y: H, text: "0" }),
      svg("text", { x: PAD, y: H + 20, text: when(buckets[0].start) }),
      slots > 1 ? svg("text", { x: W, y: H + 20, "text-anchor": "end", text: when(buckets[buckets.length - 1].start) }) : null);
    return chart;
  }

  function barsPerItem(top, labels) {
    const W = 700, RH = 20, LW = 320;
    const max = top[0].num_recalled;
    const chart = svg("svg", { width: W, height: top.length * RH + 10, role: "img", id: "recalls-per-item", "aria-label": "recalls per item, most recalled first" });
    top.forEach((r, i) => {
      const w = (r.num_recalled / max) * (W - LW - 50);
      chart.append(svg("text", { x: 0, y: i * RH + 14, text: clip(labels.get(r.id) || short(r.id), 48) }),
        svg("rect", { x: LW, y: i * RH + 3, width: Math.max(1, w), height: RH - 6, fill: COLORS.recall }),
        svg("text", { x: LW + w + 6, y: i * RH + 14, text: String(r.num_recalled) }));
    });
    return chart;
  }

  render().then(follow);
})();
