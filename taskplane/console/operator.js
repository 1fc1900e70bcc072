// The operator's view: readiness and its reasons, Tasks by state and the wake queue's
// depth as small live charts (polled from the public /readyz and /metrics), the Agent Card.
import { publicRead } from "./api.js";
import { describeError } from "./composer.js";
import { fill, h, sleep, svg, timeOf } from "./dom.js";
import { byLabel, parseMetrics, reading } from "./metrics.js";
import { STATES, stateBadge } from "./states.js";

const POLL_MS = 2000;
const SAMPLES = 60;

/** A sparkline of `values` (newest last, at most SAMPLES) with a text alternative. */
function sparkline(values, label) {
  const width = 120;
  const height = 28;
  const top = Math.max(1, ...values);
  const step = width / Math.max(values.length - 1, 1);
  const xy = values.map((v, i) => [
    values.length > 1 ? i * step : width,
    height - 3 - (v / top) * (height - 6),
  ]);
  const points = xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
  const [lastX, lastY] = xy[xy.length - 1] ?? [width, height - 3];
  const first = values[0] ?? 0;
  const last = values[values.length - 1] ?? 0;
  return svg(
    "svg",
    {
      class: "spark",
      viewBox: `-3 0 ${width + 6} ${height}`,
      width: width + 6,
      height,
      role: "img",
      "aria-label": `${label}: ${first} to ${last} over the last ${values.length} readings`,
    },
    svg("line", { x1: 0, y1: height - 3, x2: width, y2: height - 3, class: "spark-base" }),
    svg("polyline", { points, class: "spark-line", fill: "none" }),
    svg("circle", { cx: lastX, cy: lastY, r: 2.5, class: "spark-dot" }),
  );
}

/** The operator view; returns its cleanup (stops polling). */
export function operatorView(main) {
  const controller = new AbortController();
  const history = { depth: [], states: Object.fromEntries(Object.keys(STATES).map((s) => [s, []])) };
  const readiness = h("div", { class: "readiness" }, "Reading /readyz…");
  const states = h("table", { class: "chart-table" });
  const queue = h("div", { class: "queue" });
  const card = h("div", { class: "card" }, "Reading the Agent Card…");
  const checked = h("p", { class: "hint" });

  main.append(
    h("h1", { tabindex: "-1" }, "Operator"),
    checked,
    h("section", { "aria-labelledby": "ready-h" }, h("h2", { id: "ready-h" }, "Readiness"), readiness),
    h(
      "section",
      { "aria-labelledby": "states-h" },
      h("h2", { id: "states-h" }, "Tasks by state, on this server (all principals)"),
      h(
        "p",
        { class: "hint" },
        "Counted from /metrics over every principal's Tasks on this server, not only yours; " +
          "the Tasks page lists only your own.",
      ),
      states,
    ),
    h("section", { "aria-labelledby": "queue-h" }, h("h2", { id: "queue-h" }, "Wake queue"), queue),
    h("section", { "aria-labelledby": "card-h" }, h("h2", { id: "card-h" }, "Agent Card"), card),
  );

  function push(list, value) {
    list.push(value);
    if (list.length > SAMPLES) list.shift();
  }

  function showReadiness({ status, text }) {
    let body = {};
    try {
      body = JSON.parse(text);
    } catch {
      body = {};
    }
    const ready = status === 200;
    fill(
      readiness,
      h(
        "p",
        { class: ready ? "state state-completed" : "state state-failed" },
        h("span", { "aria-hidden": "true" }, ready ? "✓ " : "✗ "),
        ready ? "Ready" : `Not ready (HTTP ${status})`,
      ),
      (body.reasons ?? []).length
        ? h("ul", { class: "reasons" }, body.reasons.map((r) => h("li", {}, r)))
        : h("p", {}, ready ? "No reasons against readiness." : ""),
    );
  }

  function showMetrics(text) {
    const samples = parseMetrics(text);
    const counts = byLabel(samples, "taskplane_tasks", "state");
    for (const state of Object.keys(STATES)) push(history.states[state], counts[state] ?? 0);
    const depth = reading(samples, "taskplane_wake_queue_depth") ?? 0;
    const limit = reading(samples, "taskplane_wake_queue_limit");
    const running = reading(samples, "taskplane_turn_running");
    push(history.depth, depth);
    fill(
      states,
      h("caption", { class: "visually-hidden" }, "Stored tasks of all principals on this server by state, with their trend"),
      h("thead", {}, h("tr", {}, ["State", "Tasks", "Trend"].map((t) => h("th", { scope: "col" }, t)))),
      h(
        "tbody",
        {},
        Object.keys(STATES).map((state) =>
          h(
            "tr",
            {},
            h("th", { scope: "row" }, stateBadge(state)),
            h("td", { class: "number" }, String(counts[state] ?? 0)),
            h("td", {}, sparkline(history.states[state], `${STATES[state].label} tasks`)),
          ),
        ),
      ),
    );
    fill(
      queue,
      h(
        "p",
        {},
        `Depth now: ${depth}`,
        limit !== null ? ` of at most ${limit} waiting` : "",
        running !== null ? (running ? "; a turn is running." : "; no turn is running.") : "",
      ),
      sparkline(history.depth, "Wake queue depth"),
    );
  }

  async function showCard() {
    try {
      const { status, text } = await publicRead("/.well-known/agent-card.json", controller.signal);
      if (status !== 200) throw new Error(`HTTP ${status}`);
      const value = JSON.parse(text);
      const extensions = value.capabilities?.extensions ?? [];
      fill(
        card,
        h(
          "dl",
          {},
          h("dt", {}, "Name"), h("dd", {}, value.name ?? "—"),
          h("dt", {}, "Description"), h("dd", {}, value.description ?? "—"),
          h("dt", {}, "Version"), h("dd", {}, value.version ?? "—"),
          h("dt", {}, "Interfaces"),
          h("dd", {}, (value.supportedInterfaces ?? []).map((i) => h("div", {}, `${i.protocolBinding} ${i.protocolVersion} at ${i.url}`))),
          h("dt", {}, "Streaming"), h("dd", {}, value.capabilities?.streaming ? "yes" : "no"),
          h("dt", {}, "Push notifications"), h("dd", {}, value.capabilities?.pushNotifications ? "yes" : "no"),
          h("dt", {}, "Extensions"),
          h("dd", {}, extensions.length ? h("ul", {}, extensions.map((e) => h("li", {}, h("code", {}, e.uri), e.required ? " (required)" : ""))) : "none"),
          h("dt", {}, "Skills"),
          h("dd", {}, (value.skills ?? []).length ? h("ul", {}, value.skills.map((s) => h("li", {}, h("strong", {}, s.name ?? s.id), s.description ? `: ${s.description}` : ""))) : "none"),
        ),
        h("details", {}, h("summary", {}, "The card as JSON"), h("pre", { tabindex: "0" }, JSON.stringify(value, null, 2))),
      );
    } catch (error) {
      if (error.name !== "AbortError") fill(card, `Could not read the Agent Card: ${describeError(error)}`);
    }
  }

  async function poll() {
    while (!controller.signal.aborted) {
      try {
        const [ready, metrics] = await Promise.all([
          publicRead("/readyz", controller.signal),
          publicRead("/metrics", controller.signal),
        ]);
        showReadiness(ready);
        if (metrics.status === 200) showMetrics(metrics.text);
        fill(checked, "Polled every 2 s; last reading ", timeOf(new Date().toISOString()), ".");
      } catch (error) {
        if (error.name === "AbortError") return;
        fill(readiness, h("p", { class: "state state-failed" }, `✗ Unreachable: ${describeError(error)}`));
      }
      try {
        await sleep(POLL_MS, controller.signal);
      } catch {
        return;
      }
    }
  }

  showCard();
  poll();
  return () => controller.abort();
}
