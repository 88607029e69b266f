// The delivery history page: sessions -> a session's deliveries -> one delivery's attempts.
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

  function when(seconds) {
    if (seconds === null || seconds === undefined) return "";
    return new Date(seconds * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
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

  function table(id, headings, rows) {
    return el("table", { id: id },
      el("thead", {}, el("tr", {}, headings.map((h) => el("th", {}, h)))),
      el("tbody", {}, rows));
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
      return el("tr", { "data-session": s.session_id },
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
    const rows = data.deliveries.map((d) => el("tr", { "data-delivery": d.id },
      el("td", {}, el("a", { href: deliveryHref(route.session, d.id), class: "delivery-link" }, "#" + d.id)),
      el("td", {}, when(d.started_at)),
      el("td", {}, d.hook),
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
        el("span", { class: "quiet" }, when(attempt.started_at) + " · " + duration(attempt.duration_ms))),
      attempt.summary_only ? el("p", { class: "quiet" }, "No attempt rows were journaled for this delivery: shown is what its execution row holds, the request and the last response status.") : null,
      el("div", { class: "exchange" }, requestPart, responsePart));
  }

  function redeliverPart(route, delivery) {
    const button = el("button", { id: "redeliver", type: "button" }, pending.has(delivery.id) ? "Redelivering…" : "Redeliver");
    button.disabled = pending.has(delivery.id) || !delivery.replayable;
    button.addEventListener("click", () => redeliver(route, delivery.id));
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

  function renderDelivery(route, data) {
    const d = data.delivery;
    setCrumbs([el("a", { href: "#/" }, "sessions"), sessionCrumb(route.session, data.session),
      el("a", { href: deliveryHref(route.session, d.id) }, "#" + d.id)]);
    const replays = d.replays.length ? d.replays.map((r, i) => [i ? ", " : "",
      el("a", { href: deliveryHref(route.session, r.id), class: "replay-link" }, "#" + r.id), " " + r.outcome]) : "";
    show(
      el("h2", {}, "Delivery #" + d.id + ": ", d.hook, " on ", d.event, " ", deliveryBadge(d)),
      d.in_flight ? el("p", { id: "in-flight", class: "quiet" }, "Still retrying (" + (d.message || "") +
        "); shown are the attempts made so far, and this page follows it until it ends.") : null,
      d.outcome === "unfinished" ? el("p", { id: "in-flight", class: "quiet" },
        "This delivery was still retrying when its run stopped without finishing it.") : null,
      facts([["started", when(d.started_at)], ["attempts", String(d.attempts)], ["duration", duration(d.duration_ms)],
        ["result", result(d)], ["error", d.error_type || ""], ["message", d.message], ["idempotency key", d.idempotency_key],
        ["trace id", d.trace_id], ["replay of", d.replayed_from !== null ? el("a", { href: deliveryHref(route.session, d.replayed_from) }, "#" + d.replayed_from) : ""],
        ["redelivered as", replays ? el("span", {}, replays) : ""]]),
      redeliverPart(route, d),
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
    const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    if (parts[0] === "s" && parts[1]) {
      if (parts[2] === "d" && /^[0-9]+$/.test(parts[3] || "")) return { view: "delivery", session: parts[1], delivery: parts[3] };
      return { view: "deliveries", session: parts[1] };
    }
    return { view: "sessions" };
  }

  function apiFor(route) {
    if (route.view === "delivery") return "/api/deliveries/" + encodeURIComponent(route.delivery);
    if (route.view === "deliveries") return "/api/sessions/" + encodeURIComponent(route.session) + "/deliveries";
    return "/api/sessions";
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
    const route = currentRoute();
    const url = apiFor(route);
    let text;
    try {
      text = await getJSON(url);
    } catch (e) {
      if (e.status === 401) {
        askForTheUrl("The server refused this tab's access token (was `ui` restarted?).");
        shownKey = null;
      }
      live.textContent = "not updating: " + (e.message || e);
      live.className = "stale";
      return;
    }
    live.textContent = "live · " + new Date().toLocaleTimeString();
    live.className = "fresh";
    if (route.view !== currentRoute().view || url !== apiFor(currentRoute())) return; // moved on meanwhile
    const key = url + "\n" + text;
    if (key === shownKey) return;
    shownKey = key;
    const data = JSON.parse(text);
    if (route.view === "delivery") renderDelivery(route, data);
    else if (route.view === "deliveries") renderDeliveries(route, data);
    else renderSessions(data);
    document.title = "otel-lifecycle-hooks: " + (route.view === "sessions" ? "sessions" : route.view === "deliveries" ? "deliveries" : "delivery #" + route.delivery);
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
