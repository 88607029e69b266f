// The delivery history page: the delivery log (filters, search, paging), sessions -> a
// session's deliveries -> one delivery's attempts, and a view per hook.
//
// Every time is shown in UTC, the one time zone of the page: relative ("3 min ago") with the
// absolute moment in its title. A view's filters live in the URL's fragment (#/log?hook=...),
// so a reload or a shared link shows the same view.
//
// Everything shown comes from the journal, which holds what the agent reported and what remote
// endpoints answered: it is hostile. It reaches the page only as text (createTextNode,
// textContent), never as markup; links are built here from ids, percent-encoded.
//
// The access token arrives in the printed URL's fragment (#token=...), which the browser never
// sends to a server. It is moved at once into sessionStorage (scoped to this page's origin,
// port included, unlike a cookie, which every server on 127.0.0.1 would be sent) and out of
// the address bar and history, and travels only in a header of this page's own requests.
"use strict";

(function () {
  const TOKEN_HEADER = "X-Lifecycle-Hooks-Token";
  const POLL_MS = 1000;
  const TOKEN_KEY = "otel-lifecycle-hooks-ui-token";
  let token = takeToken();
  const main = document.getElementById("main");
  const crumbs = document.getElementById("crumbs");
  const live = document.getElementById("live");

  let shownKey = null; // the route and answer last rendered: an unchanged answer is not redrawn
  let polling = false;
  // What a Redeliver click answered, per delivery id, kept across redraws.
  const redelivered = new Map();
  const pending = new Set();
  let settings = { trace_url: null }; // the server's, read once the token is known
  let settingsRead = false;
  // The log's filters, in the order the form shows them; what the API takes besides.
  const FILTERS = ["q", "status", "hook", "event", "agent", "since", "until"];
  const CURSORS = ["before", "after"];
  const STATUSES = ["", "failures", "success", "failed", "timeout", "dropped", "interrupted", "skipped", "refused", "running"];

  function takeToken() {
    const given = /^#token=([A-Za-z0-9_-]+)$/.exec(location.hash);
    if (given) {
      sessionStorage.setItem(TOKEN_KEY, given[1]);
      history.replaceState(null, "", location.pathname + "#/");
    }
    return sessionStorage.getItem(TOKEN_KEY);
  }

  // -- building the page: elements and text only --

  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name.startsWith("data-")) node.setAttribute(name, String(value));
      else if (name === "href") node.setAttribute("href", value);
      else node.setAttribute(name, String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // The main part's content; like el(), it leaves out null, undefined and false, which
  // replaceChildren itself would show as the words "null" and "undefined".
  function show(...children) {
    main.replaceChildren(...children.flat(Infinity).filter(
      (child) => child !== null && child !== undefined && child !== false));
  }

  function sessionHref(sessionId) {
    return "#/s/" + encodeURIComponent(sessionId);
  }

  function deliveryHref(sessionId, deliveryId) {
    return sessionHref(sessionId) + "/d/" + encodeURIComponent(String(deliveryId));
  }

  // The absolute moment, always UTC: "2026-05-01 12:00:00 UTC".
  function absolute(seconds) {
    return new Date(seconds * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }

  function relative(seconds) {
    const ago = Date.now() / 1000 - seconds;
    const future = ago < 0;
    const span = Math.abs(ago);
    let text;
    if (span < 45) text = Math.round(span) + " s";
    else if (span < 45 * 60) text = Math.round(span / 60) + " min";
    else if (span < 36 * 3600) text = Math.round(span / 3600) + " h";
    else text = Math.round(span / 86400) + " d";
    return future ? "in " + text : text + " ago";
  }

  // A moment as the page shows it: relative, the absolute UTC time on hover (its title).
  function when(seconds) {
    if (seconds === null || seconds === undefined) return "";
    return el("time", { datetime: new Date(seconds * 1000).toISOString(), title: absolute(seconds), "data-ts": seconds },
      relative(seconds));
  }

  // Relative times age while the page is open: refreshed on every poll, data or not.
  function ageTimes() {
    for (const node of document.querySelectorAll("time[data-ts]")) {
      node.textContent = relative(Number(node.getAttribute("data-ts")));
    }
  }

  function duration(ms) {
    if (ms === null || ms === undefined) return "";
    return ms < 1000 ? Math.round(ms) + " ms" : (ms / 1000).toFixed(2) + " s";
  }

  function outcomeBadge(outcome) {
    return el("span", { class: "outcome outcome-" + String(outcome).replace(/[^a-z-]/g, "") }, outcome);
  }

  // A delivery still retrying: the attempt it is making or waiting to make.
  function deliveryBadge(delivery) {
    if (!delivery.in_flight) return outcomeBadge(delivery.outcome);
    return el("span", { class: "outcome outcome-running", title: delivery.message || "" },
      "running · attempt " + (Number(delivery.attempts) + 1));
  }

  function result(delivery) {
    if (delivery.http_status !== null && delivery.http_status !== undefined) return "HTTP " + delivery.http_status;
    if (delivery.exit_code !== null && delivery.exit_code !== undefined) return "exit " + delivery.exit_code;
    return "";
  }

  // A table in a box that scrolls sideways on a narrow screen: the page itself never does.
  function table(id, headings, rows) {
    return el("div", { class: "scroll" }, el("table", { id: id },
      el("thead", {}, el("tr", {}, headings.map((h) => el("th", {}, h)))),
      el("tbody", {}, rows)));
  }

  // A row that opens `href` on a click anywhere in it, or Enter / Space when it has focus; a
  // link inside it still opens its own place.
  function rowTo(href, attributes, ...cells) {
    const row = el("tr", { ...attributes, class: "row-link", tabindex: "0", "data-href": href }, ...cells);
    row.addEventListener("click", (event) => {
      if (event.target.closest("a, button") || String(window.getSelection() || "")) return;
      location.hash = href;
    });
    row.addEventListener("keydown", (event) => {
      if (event.target !== row || (event.key !== "Enter" && event.key !== " ")) return;
      event.preventDefault();
      location.hash = href;
    });
    return row;
  }

  function hookHref(hook) {
    return "#/hooks/" + encodeURIComponent(hook);
  }

  function logHref(params) {
    const query = new URLSearchParams();
    for (const [name, value] of params) if (value) query.append(name, value);
    const text = query.toString();
    return "#/log" + (text ? "?" + text : "");
  }

  // A delivery's own view: under its session when it has one.
  function deliveryPlace(delivery) {
    return delivery.session_id ? deliveryHref(delivery.session_id, delivery.id) : "#/d/" + encodeURIComponent(String(delivery.id));
  }

  function body(text) {
    if (text === null || text === undefined) return el("p", { class: "quiet" }, "(no body)");
    let shown = String(text);
    try {
      shown = JSON.stringify(JSON.parse(shown), null, 2);
    } catch (e) {
      // not JSON: shown as it is
    }
    return el("pre", { class: "body" }, shown);
  }

  function headersTable(pairs) {
    // [name, value] pairs, in the order sent (a name may repeat).
    if (!pairs || !pairs.length) return el("p", { class: "quiet" }, "(no headers)");
    return el("table", { class: "headers" },
      el("tbody", {}, pairs.map(([name, value]) =>
        el("tr", {}, el("th", {}, String(name)), el("td", {}, String(value))))));
  }

  function facts(pairs) {
    return el("dl", { class: "facts" }, pairs
      .filter(([, value]) => value !== null && value !== undefined && value !== "")
      .map(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
  }

  // A session as the breadcrumb names it: its agent and the start of its id.
  function sessionCrumb(sessionId, session) {
    const short = String(sessionId).slice(0, 8);
    const name = session && session.agent_name ? session.agent_name : "(unnamed agent)";
    return el("a", { href: sessionHref(sessionId), class: "session-crumb", title: "session " + sessionId },
      name, " ", el("span", { class: "mono quiet" }, short));
  }

  function setCrumbs(parts) {
    crumbs.replaceChildren(...parts.flatMap((part, i) => [i ? " / " : "", part]));
  }

  // -- the three views --

  function renderSessions(data) {
    setCrumbs([el("a", { href: "#/" }, "sessions")]);
    // The journal was unavailable and writes wait on this machine: said above the list.
    const notice = data.journal_notice ? [el("p", { class: "notice", role: "status" }, data.journal_notice)] : [];
    if (!data.sessions.length) {
      show(...notice, el("p", { class: "quiet" }, "No sessions in this journal yet. Start one with `otel-lifecycle-hooks run`."));
      return;
    }
    const rows = data.sessions.map((s) => {
      const failed = s.failed || 0;
      return rowTo(sessionHref(s.session_id), { "data-session": s.session_id },
        el("td", {}, el("a", { href: sessionHref(s.session_id), class: "session-link" }, s.agent_name || "(unnamed)")),
        el("td", { class: "mono" }, s.session_id),
        el("td", {}, s.state),
        el("td", {}, when(s.started_at)),
        el("td", {}, when(s.ended_at)),
        el("td", { class: "num" }, String(s.deliveries)),
        el("td", { class: "num" }, failed ? el("span", { class: "outcome outcome-failed" }, String(failed)) : "0"));
    });
    show(...notice, el("h2", {}, "Sessions"),
      table("sessions", ["agent", "session", "state", "started", "ended", "deliveries", "failed"], rows));
  }

  function renderDeliveries(route, data) {
    const s = data.session;
    setCrumbs([el("a", { href: "#/" }, "sessions"), sessionCrumb(route.session, s)]);
    const heading = el("h2", {}, "Deliveries of session ", el("span", { class: "mono" }, route.session));
    const about = s ? facts([["agent", s.agent_name], ["agent id", s.agent_id], ["host", s.host], ["state", s.state],
      ["started", when(s.started_at)], ["ended", when(s.ended_at)],
      ["exit code", s.exit_code === null ? "" : String(s.exit_code)], ["templates", s.template_files.join(", ")]])
      : el("p", { class: "quiet" }, "This session is not in the journal's sessions table.");
    if (!data.deliveries.length) {
      show(heading, about, el("p", { class: "quiet" }, "No deliveries yet; this page shows them as they are journaled."));
      return;
    }
    const rows = data.deliveries.map((d) => rowTo(deliveryHref(route.session, d.id), { "data-delivery": d.id },
      el("td", {}, el("a", { href: deliveryHref(route.session, d.id), class: "delivery-link" }, "#" + d.id)),
      el("td", {}, when(d.started_at)),
      el("td", {}, el("a", { href: hookHref(d.hook), class: "hook-link" }, d.hook)),
      el("td", {}, d.event + (d.recovered ? " (recovered)" : "")),
      el("td", {}, deliveryBadge(d)),
      el("td", { class: "num" }, String(d.attempts)),
      el("td", { class: "num" }, duration(d.duration_ms)),
      el("td", {}, result(d)),
      el("td", {}, d.error_type || ""),
      el("td", {}, d.replayed_from !== null ? el("a", { href: deliveryHref(route.session, d.replayed_from) }, "#" + d.replayed_from) : "")));
    show(heading, about,
      table("deliveries", ["id", "started", "hook", "event", "outcome", "attempts", "duration", "result", "error", "replay of"], rows));
  }

  // -- the delivery log, and the view of one hook --

  function logRows(deliveries) {
    return deliveries.map((d) => rowTo(deliveryPlace(d), { "data-delivery": d.id },
      el("td", {}, el("a", { href: deliveryPlace(d), class: "delivery-link" }, "#" + d.id)),
      el("td", {}, when(d.started_at)),
      el("td", {}, el("a", { href: hookHref(d.hook), class: "hook-link" }, d.hook)),
      el("td", {}, d.event + (d.recovered ? " (recovered)" : "")),
      el("td", {}, deliveryBadge(d)),
      el("td", { class: "num" }, String(d.attempts)),
      el("td", { class: "num" }, duration(d.duration_ms)),
      el("td", {}, result(d)),
      el("td", { class: "mono" }, d.agent_id),
      el("td", { class: "mono", title: d.session_id }, String(d.session_id).slice(0, 12))));
  }

  // Older / Newer: links to the same view with the next cursor, or a greyed word at the end.
  function pager(route, data) {
    const to = (name, cursor) => {
      const params = [...route.params.filter(([key]) => !CURSORS.includes(key)), [name, cursor]];
      return route.view === "hook" ? hookHref(route.hook) + "?" + new URLSearchParams(params) : logHref(params);
    };
    // Shown above and below the table: told apart by class, not id.
    const link = (which, label, name, cursor) => cursor
      ? el("a", { href: to(name, cursor), class: "page-link " + which }, label)
      : el("span", { class: "quiet page-link " + which, "aria-disabled": "true" }, label);
    return el("nav", { class: "pager", "aria-label": "pages" },
      link("newer", "← Newer", "after", data.newer), " ", link("older", "Older →", "before", data.older));
  }

  function logTable(route, data) {
    if (!data.deliveries.length) {
      return el("p", { class: "quiet", id: "no-deliveries" }, "No delivery matches these filters.");
    }
    return [pager(route, data),
      table("log", ["id", "started", "hook", "event", "outcome", "attempts", "duration", "result", "agent", "session"], logRows(data.deliveries)),
      pager(route, data)];
  }

  function filterForm(route) {
    const given = new Map(route.params);
    const field = (name, label, input) => el("label", { class: "filter" }, el("span", {}, label), input);
    const text = (name, placeholder) => el("input", { name: name, id: "filter-" + name, type: "text",
      value: given.get(name) || "", placeholder: placeholder, autocomplete: "off", spellcheck: "false" });
    const status = el("select", { name: "status", id: "filter-status" },
      STATUSES.map((value) => el("option", { value: value, selected: (given.get("status") || "") === value ? "selected" : null },
        value || "any")));
    const form = el("form", { id: "filters", role: "search" },
      field("q", "search", text("q", "delivery id, session id or idempotency key")),
      field("status", "status", status),
      field("hook", "hook", text("hook", "hook name")),
      field("event", "event", text("event", "post-start…")),
      field("agent", "agent", text("agent", "agent id or name")),
      field("since", "since (UTC)", text("since", "2026-05-01T12:00:00Z")),
      field("until", "until (UTC)", text("until", "2026-05-01T13:00:00Z")),
      el("span", { class: "filter-buttons" },
        el("button", { type: "submit", id: "apply-filters" }, "Apply"),
        el("a", { href: "#/log", id: "clear-filters" }, "clear")));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const params = FILTERS.map((name) => [name, String(new FormData(form).get(name) || "").trim()]);
      location.hash = logHref(params); // a new filter starts at the newest page
    });
    return form;
  }

  // The log redraws only its results on a poll: what is being typed in the form stays.
  function renderLog(route, [data]) {
    setCrumbs([el("a", { href: "#/log" }, "delivery log")]);
    const key = location.hash;
    let view = document.getElementById("log-view");
    if (!view || view.getAttribute("data-key") !== key) {
      view = el("div", { id: "log-view", "data-key": key },
        el("h2", {}, "Delivery log"), filterForm(route), el("div", { id: "log-results" }));
      show(view);
    }
    document.getElementById("log-results").replaceChildren(
      ...[data.error ? el("p", { class: "error", id: "filter-error", role: "alert" }, data.error) : logTable(route, data)].flat());
  }

  function percent(fraction) {
    return fraction === null || fraction === undefined ? "–" : (fraction * 100).toFixed(1) + " %";
  }

  function renderHook(route, [summary, data]) {
    setCrumbs([el("a", { href: "#/log" }, "delivery log"), el("a", { href: hookHref(route.hook) }, "hook " + route.hook)]);
    const figures = summary.deliveries
      ? facts([["deliveries", summary.deliveries + (summary.deliveries === summary.window ? " (the newest " + summary.window + ")" : "")],
        ["success rate", el("span", { id: "success-rate" }, percent(summary.success_rate))],
        ["succeeded", String(summary.succeeded)], ["failed", String(summary.failed)],
        ["latency p50", el("span", { id: "p50" }, duration(summary.p50_ms))],
        ["latency p95", el("span", { id: "p95" }, duration(summary.p95_ms))],
        ["latency p99", el("span", { id: "p99" }, duration(summary.p99_ms))]])
      : el("p", { class: "quiet" }, "This hook has no deliveries in the journal.");
    show(el("h2", {}, "Hook ", el("span", { class: "mono" }, route.hook)),
      el("div", { id: "hook-summary" }, figures),
      el("p", {}, el("a", { href: logHref([["hook", route.hook]]), id: "hook-in-log" }, "this hook in the delivery log")),
      el("h3", {}, "Recent deliveries"),
      logTable(route, data));
  }

  function attemptSection(attempt) {
    const request = attempt.request || {};
    const response = attempt.response;
    const requestPart = el("div", { class: "request" }, el("h4", {}, "Request"));
    if (request.argv) {
      requestPart.append(el("pre", { class: "argv" }, request.argv.map(String).join(" ")));
    } else if (request.method || request.url) {
      requestPart.append(el("p", { class: "mono request-line" }, (request.method || "") + " " + (request.url || "")),
        headersTable(request.headers), body(request.body));
    } else {
      requestPart.append(el("p", { class: "quiet" }, "(no request journaled)"));
    }
    const responsePart = el("div", { class: "response" }, el("h4", {}, "Response"));
    if (response) {
      responsePart.append(el("p", { class: "mono response-status" }, response.status === null ? "(no status)" : "HTTP " + response.status));
      if (!attempt.summary_only) responsePart.append(headersTable(response.headers), body(response.body));
    } else if (attempt.exit_code !== null && attempt.exit_code !== undefined) {
      responsePart.append(el("p", { class: "mono response-status" }, "exit " + attempt.exit_code));
    } else {
      responsePart.append(el("p", { class: "quiet" }, "(no response)"));
    }
    if (attempt.stdout) responsePart.append(el("h4", {}, "stdout"), el("pre", { class: "stdout" }, attempt.stdout));
    if (attempt.stderr) responsePart.append(el("h4", {}, "stderr"), el("pre", { class: "stderr" }, attempt.stderr));
    if (attempt.error_type || attempt.message) {
      responsePart.append(el("p", { class: "error" }, [attempt.error_type, attempt.message].filter(Boolean).join(": ")));
    }
    const title = attempt.summary_only
      ? "Last attempt (" + attempt.of_attempts + " made)"
      : "Attempt " + attempt.number + (attempt.of_attempts ? " of " + attempt.of_attempts : "");
    return el("section", { class: "attempt", "data-attempt": attempt.number },
      el("h3", {}, title, " ", outcomeBadge(attempt.outcome || ""), " ",
        el("span", { class: "quiet" }, when(attempt.started_at), " · ", duration(attempt.duration_ms))),
      attempt.summary_only ? el("p", { class: "quiet" }, "No attempt rows were journaled for this delivery: shown is what its execution row holds, the request and the last response status.") : null,
      el("div", { class: "exchange" }, requestPart, responsePart));
  }

  // The request a Redeliver sends, shown before it is sent; sent only on "Redeliver" there.
  function askToRedeliver(route, delivery, outgoing) {
    const dialog = document.getElementById("redeliver-dialog");
    const o = outgoing || {};
    const cancel = el("button", { type: "button", id: "redeliver-cancel", autofocus: "autofocus" }, "Cancel");
    const confirm = el("button", { type: "button", id: "redeliver-confirm", class: "primary" }, "Redeliver");
    cancel.addEventListener("click", () => dialog.close());
    confirm.addEventListener("click", () => {
      dialog.close();
      redeliver(route, delivery.id);
    });
    dialog.replaceChildren(
      el("h3", {}, "Redeliver #" + delivery.id + "?"),
      el("p", {}, "This sends the request below again, once, with the same idempotency key."),
      el("p", { class: "mono request-line", id: "dialog-request-line" }, (o.method || "") + " " + (o.url || "")),
      headersTable(o.headers),
      o.left_out && o.left_out.length
        ? el("p", { class: "quiet", id: "dialog-left-out" }, "Credentials not shown here, filled in from the template when sent: " + o.left_out.join(", "))
        : null,
      body(o.body),
      el("div", { class: "dialog-buttons" }, cancel, confirm));
    dialog.showModal();
  }

  function redeliverPart(route, delivery, outgoing) {
    const button = el("button", { id: "redeliver", type: "button" }, pending.has(delivery.id) ? "Redelivering…" : "Redeliver");
    button.disabled = pending.has(delivery.id) || !delivery.replayable;
    button.addEventListener("click", () => askToRedeliver(route, delivery, outgoing));
    const answer = redelivered.get(delivery.id);
    let shown = null;
    if (answer) {
      const o = answer.outcome || {};
      const status = o.status_code !== null && o.status_code !== undefined ? " (HTTP " + o.status_code + ")" : "";
      // Refused (or a dry run): nothing was sent, and the line says so first.
      const sent = !answer.error && o.outcome !== "refused" && o.outcome !== "dry-run";
      shown = el("p", { id: "redeliver-result", class: "outcome-" + (o.outcome === "success" ? "success" : "failed") },
        answer.error ? "Redeliver failed: " + answer.error
          : !sent ? ["Not redelivered: ", o.message || o.outcome]
          : ["Redelivered: " + o.outcome + status,
            o.id !== null && o.id !== undefined ? [" as ", el("a", { href: deliveryHref(route.session, o.id), id: "redelivered-link" }, "delivery #" + o.id)] : "",
            o.message ? ": " + o.message : ""]);
    }
    const about = delivery.replayable
      ? " sends the journaled request again, once, with the same idempotency key (as `otel-lifecycle-hooks replay " + delivery.id + "`)."
      : " is for failed, timed-out, dropped or interrupted http and webhook deliveries (what `otel-lifecycle-hooks replay` re-sends).";
    return el("div", { class: "redeliver" }, button, el("span", { class: "quiet" }, about), shown);
  }

  // A trace id linked to the operator's trace UI (`ui --trace-url`), else shown as text.
  function traceLink(traceId) {
    if (!traceId) return "";
    if (!settings.trace_url || !/^[0-9a-f]{32}$/.test(traceId)) return el("span", { class: "mono", id: "trace-id" }, traceId);
    return el("a", { href: settings.trace_url.split("{trace_id}").join(traceId), id: "trace-link", class: "mono",
      target: "_blank", rel: "noopener noreferrer" }, traceId);
  }

  function curlPart(command) {
    if (!command) return null;
    const shown = el("pre", { id: "curl", class: "curl" }, command);
    const note = el("span", { class: "quiet", id: "curl-copied", role: "status" });
    const button = el("button", { type: "button", id: "copy-curl" }, "Copy as curl");
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(command);
        note.textContent = " copied";
      } catch (e) {
        // No clipboard here (a browser's policy): the text is selected for Ctrl-C instead.
        getSelection().selectAllChildren(shown);
        note.textContent = " selected: press Ctrl-C to copy";
      }
    });
    return el("details", { class: "curl-part" }, el("summary", {}, "Request as curl (credentials left out)"),
      el("p", {}, button, note), shown);
  }

  function renderDelivery(route, data) {
    const d = data.delivery;
    setCrumbs(route.session
      ? [el("a", { href: "#/" }, "sessions"), sessionCrumb(route.session, data.session), el("a", { href: deliveryHref(route.session, d.id) }, "#" + d.id)]
      : [el("a", { href: "#/log" }, "delivery log"), el("a", { href: deliveryPlace(d) }, "#" + d.id)]);
    const replays = d.replays.length ? d.replays.map((r, i) => [i ? ", " : "",
      el("a", { href: deliveryHref(route.session, r.id), class: "replay-link" }, "#" + r.id), " " + r.outcome]) : "";
    show(
      el("h2", {}, "Delivery #" + d.id + ": ", el("a", { href: hookHref(d.hook), class: "hook-link" }, d.hook), " on ", d.event, " ", deliveryBadge(d)),
      d.in_flight ? el("p", { id: "in-flight", class: "quiet" }, "Still retrying (" + (d.message || "") +
        "); shown are the attempts made so far, and this page follows it until it ends.") : null,
      d.outcome === "unfinished" ? el("p", { id: "in-flight", class: "quiet" },
        "This delivery was still retrying when its run stopped without finishing it.") : null,
      facts([["started", when(d.started_at)], ["attempts", String(d.attempts)], ["duration", duration(d.duration_ms)],
        ["result", result(d)], ["error", d.error_type || ""], ["message", d.message], ["idempotency key", d.idempotency_key],
        ["trace id", traceLink(d.trace_id)], ["replay of", d.replayed_from !== null ? el("a", { href: deliveryHref(route.session, d.replayed_from) }, "#" + d.replayed_from) : ""],
        ["redelivered as", replays ? el("span", {}, replays) : ""]]),
      curlPart(data.curl),
      redeliverPart(route, d, data.outgoing),
      el("h3", {}, "Attempts"),
      el("div", { id: "attempts" }, data.attempts.map(attemptSection)));
  }

  // -- talking to the server --

  async function getJSON(url) {
    const response = await fetch(url, { headers: { [TOKEN_HEADER]: token }, cache: "no-store", credentials: "omit" });
    const text = await response.text();
    if (!response.ok) {
      let reason = response.status + "";
      try { reason = JSON.parse(text).error || reason; } catch (e) { /* shown as the status */ }
      const error = new Error(reason);
      error.status = response.status;
      throw error;
    }
    return text;
  }

  async function redeliver(route, deliveryId) {
    if (pending.has(deliveryId)) return;
    pending.add(deliveryId);
    shownKey = null;
    await refresh();
    try {
      const response = await fetch("/api/deliveries/" + encodeURIComponent(String(deliveryId)) + "/redeliver", {
        method: "POST", cache: "no-store", credentials: "omit",
        headers: { [TOKEN_HEADER]: token, "Content-Type": "application/json" }, body: "{}",
      });
      const answer = await response.json();
      redelivered.set(deliveryId, response.ok ? answer : { error: answer.error || String(response.status) });
    } catch (e) {
      redelivered.set(deliveryId, { error: String(e.message || e) });
    } finally {
      pending.delete(deliveryId);
      shownKey = null;
      await refresh();
    }
  }

  function currentRoute() {
    const [path, query] = location.hash.replace(/^#\/?/, "").split("?", 2);
    const params = [...new URLSearchParams(query || "")].filter(([name]) => FILTERS.includes(name) || CURSORS.includes(name));
    let parts;
    try {
      parts = path.split("/").map(decodeURIComponent);
    } catch (e) {
      return { view: "sessions", params: [] };
    }
    if (parts[0] === "s" && parts[1]) {
      if (parts[2] === "d" && /^[0-9]+$/.test(parts[3] || "")) return { view: "delivery", session: parts[1], delivery: parts[3], params: [] };
      return { view: "deliveries", session: parts[1], params: [] };
    }
    if (parts[0] === "d" && /^[0-9]+$/.test(parts[1] || "")) return { view: "delivery", session: null, delivery: parts[1], params: [] };
    if (parts[0] === "log") return { view: "log", params: params };
    if (parts[0] === "hooks" && parts[1]) return { view: "hook", hook: parts[1], params: params.filter(([name]) => CURSORS.includes(name)) };
    return { view: "sessions", params: [] };
  }

  // The API answers a view is drawn from.
  function apisFor(route) {
    const query = (params) => (params.length ? "?" + new URLSearchParams(params) : "");
    if (route.view === "delivery") return ["/api/deliveries/" + encodeURIComponent(route.delivery)];
    if (route.view === "deliveries") return ["/api/sessions/" + encodeURIComponent(route.session) + "/deliveries"];
    if (route.view === "log") return ["/api/deliveries" + query(route.params)];
    if (route.view === "hook") {
      return ["/api/hooks/" + encodeURIComponent(route.hook), "/api/deliveries" + query([["hook", route.hook], ...route.params])];
    }
    return ["/api/sessions"];
  }

  function askForTheUrl(why) {
    setCrumbs([]);
    show(el("p", { class: "quiet", id: "needs-token" }, why,
      " Open the URL that `otel-lifecycle-hooks ui` printed (it ends in #token=…) in this tab."));
    document.title = "otel-lifecycle-hooks: deliveries";
  }

  async function refresh() {
    if (!token) {
      askForTheUrl("This tab holds no access token for the journal.");
      return;
    }
    if (!settingsRead) {
      try {
        settings = JSON.parse(await getJSON("/api/settings"));
        settingsRead = true;
      } catch (e) { /* read again on the next poll */ }
    }
    const route = currentRoute();
    const urls = apisFor(route);
    const url = urls.join("\n");
    let texts;
    try {
      texts = await Promise.all(urls.map(getJSON));
    } catch (e) {
      if (e.status === 400 && route.view === "log") {
        // A filter the server cannot read: said under the form, which stays to correct it.
        texts = [JSON.stringify({ error: e.message })];
      } else if (e.status === 401) {
        askForTheUrl("The server refused this tab's access token (was `ui` restarted?).");
        shownKey = null;
      }
      if (!texts) {
        live.textContent = "not updating: " + (e.message || e);
        live.className = "stale";
        return;
      }
    }
    live.textContent = "live · " + new Date().toISOString().slice(11, 19) + " UTC";
    live.className = "fresh";
    ageTimes();
    if (url !== apisFor(currentRoute()).join("\n")) return; // moved on meanwhile
    const key = location.hash + "\n" + texts.join("\n");
    if (key === shownKey) return;
    shownKey = key;
    const data = texts.map((text) => JSON.parse(text));
    if (route.view === "delivery") renderDelivery(route, data[0]);
    else if (route.view === "deliveries") renderDeliveries(route, data[0]);
    else if (route.view === "log") renderLog(route, data);
    else if (route.view === "hook") renderHook(route, data);
    else renderSessions(data[0]);
    document.title = "otel-lifecycle-hooks: " + ({ sessions: "sessions", deliveries: "deliveries", log: "delivery log",
      hook: "hook " + route.hook }[route.view] || "delivery #" + route.delivery);
  }

  async function poll() {
    if (polling) return;
    polling = true;
    try {
      await refresh();
    } finally {
      polling = false;
    }
  }

  window.addEventListener("hashchange", () => {
    // The printed URL opened in a tab that shows the page already (`ui` restarted, say) only
    // changes the fragment: no reload, so the new token is taken here.
    if (location.hash.startsWith("#token=")) token = takeToken();
    shownKey = null;
    refresh();
  });
  poll();
  setInterval(poll, POLL_MS);
})();
