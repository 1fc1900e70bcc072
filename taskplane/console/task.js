// One Task, live. The durable Task is the record: read it, then subscribe; when the stream
// drops before the Task finishes, read the Task again and subscribe again (design rule
// "Recovery uses durable state"), and say so on the page.
import {
  ApiError,
  cancelTask,
  ELICITATION_KEY,
  ELICITATION_URI,
  getTask,
  subscribe,
  Unreachable,
} from "./api.js";
import { composer, describeError, elicitationParts, notSent, Sender, worthRetrying } from "./composer.js";
import { fill, h, sleep, uid } from "./dom.js";
import { elicitationForm, elicitationOf } from "./elicitation.js";
import { Downloads, messageText, renderArtifact, renderMessage, shorten, timeOf } from "./parts.js";
import { stateBadge, stateLabel, TERMINAL, WAITING } from "./states.js";

const FIRST_RETRY_MS = 500;
const LAST_RETRY_MS = 8000;
const CONNECTION_LOG = 6;
/** The heading shows at most this much of the request; the History has all of it. */
const HEADING_WORDS = 8;
const HEADING_CHARS = 60;

/** The view of Task `taskId`. Returns its cleanup (stops the stream). */
export function taskView(main, { taskId }) {
  const controller = new AbortController();
  const downloads = new Downloads();
  let task = null;
  let actionsKey = null;
  let refreshing = null;

  const heading = h("h1", { tabindex: "-1" }, "Task");
  const statusBox = h("div", { class: "status-box", "aria-live": "polite", tabindex: "-1" });
  const live = h("p", { class: "live", role: "status" }, "Reading the task…");
  const log = h("ul", { class: "connection-log", "aria-label": "Connection events, newest first" });
  const actions = h("div", { class: "task-actions" });
  const history = h("ol", { class: "history" });
  const artifacts = h("ul", { class: "artifacts" });

  main.append(
    h("p", {}, h("a", { href: "#/tasks" }, "← All tasks")),
    heading,
    h("p", { class: "id-line" }, "ID ", h("code", { class: "id" }, taskId)),
    h("section", { "aria-labelledby": "status-h" }, h("h2", { id: "status-h" }, "Status"), statusBox, live, log),
    actions,
    h("section", { "aria-labelledby": "history-h" }, h("h2", { id: "history-h" }, "History"), history),
    h("section", { "aria-labelledby": "artifacts-h" }, h("h2", { id: "artifacts-h" }, "Artifacts"), artifacts),
  );

  // Whether the keyboard focus was last in the action area (a control there that got
  // disabled while sending leaves the focus on <body>), so a rebuild can move it on.
  let focusInActions = false;
  main.addEventListener("focusin", (event) => {
    focusInActions = actions.contains(event.target);
  });

  /** Add a connection event; `technical` (the server's own words) goes in a disclosure. */
  function note(text, technical) {
    log.prepend(
      h(
        "li",
        {},
        timeOf(new Date().toISOString()),
        " ",
        text,
        technical ? h("details", { class: "technical" }, h("summary", {}, "Technical details"), h("p", {}, technical)) : null,
      ),
    );
    while (log.children.length > CONNECTION_LOG) log.lastElementChild.remove();
  }

  // Each part of the page is rebuilt only when its content changed, so focus, scroll
  // and screen readers are not disturbed by updates that change nothing there.
  const shown = {};
  function changed(name, value) {
    const key = JSON.stringify(value ?? null);
    if (shown[name] === key) return false;
    shown[name] = key;
    return true;
  }

  function render() {
    const state = task.status?.state;
    const first = (task.history ?? []).find((m) => m.role === "ROLE_USER");
    const request = shorten(messageText(first), { words: HEADING_WORDS, chars: HEADING_CHARS });
    heading.textContent = `Task: ${request || taskId}`;
    document.title = `${stateLabel(state)} · ${heading.textContent} · taskplane console`;
    if (changed("status", [task.status, task.contextId])) {
      const statusText = messageText(task.status?.message);
      fill(
        statusBox,
        h("p", { class: "status-line" }, stateBadge(state), " since ", timeOf(task.status?.timestamp)),
        statusText ? h("p", { class: "status-message" }, statusText) : null,
        h("p", { class: "id-line" }, "Context ", h("code", { class: "id" }, task.contextId ?? "—")),
      );
    }
    if (changed("history", task.history)) {
      fill(history, (task.history ?? []).map((m) => renderMessage(m, downloads)));
      if (!(task.history ?? []).length) history.append(h("li", {}, "No messages."));
    }
    if (changed("artifacts", task.artifacts)) {
      fill(artifacts, (task.artifacts ?? []).map((a) => renderArtifact(a, downloads)));
      if (!(task.artifacts ?? []).length) artifacts.append(h("li", {}, "No artifacts yet."));
    }
    renderActions();
  }

  // The action area is rebuilt only when what it offers changes, so typing survives updates.
  function renderActions() {
    const state = task.status?.state;
    const key = `${state}\u0000${task.status?.message?.messageId ?? ""}`;
    if (key === actionsKey) return;
    actionsKey = key;
    const parts = [];
    if (WAITING.has(state)) parts.push(answerArea(state));
    if (!TERMINAL.has(state)) parts.push(cancelArea());
    const focusHere =
      actions.contains(document.activeElement) ||
      (focusInActions && document.activeElement === document.body);
    fill(actions, parts.length ? h("section", { "aria-labelledby": "act-h" }, h("h2", { id: "act-h" }, "Act"), parts) : null);
    // What the person acted on is gone: the focus goes to the new status, as it goes to
    // the heading of a new view, instead of being lost on the page's <body>.
    if (focusHere) statusBox.focus();
  }

  // Cancel asks first, in the page: "Cancel task" shows the question with "Yes, cancel
  // it" and "No, keep it" (the focus goes to "No, keep it"; Escape keeps the task too).
  function cancelArea() {
    const questionId = uid("cancel-q");
    const cancel = h("button", { type: "button", class: "danger" }, "Cancel task");
    const yes = h("button", { type: "button", class: "danger" }, "Yes, cancel it");
    const no = h("button", { type: "button", class: "secondary" }, "No, keep it");
    const confirm = h(
      "div",
      { class: "confirm", role: "group", "aria-labelledby": questionId, hidden: true },
      h("p", { id: questionId }, "Cancel this task? The agent stops working on it, and a canceled task cannot be resumed."),
      h("div", { class: "actions" }, yes, no),
    );
    const result = h("p", { class: "form-status", role: "status" });
    function ask(open) {
      confirm.hidden = !open;
      cancel.hidden = open;
      (open ? no : cancel).focus();
    }
    cancel.addEventListener("click", () => ask(true));
    no.addEventListener("click", () => ask(false));
    confirm.addEventListener("keydown", (event) => {
      if (event.key === "Escape") ask(false);
    });
    yes.addEventListener("click", async () => {
      yes.disabled = no.disabled = true;
      result.textContent = "Canceling…";
      try {
        adopt(await cancelTask(taskId));
        result.textContent = "";
      } catch (error) {
        result.textContent = `Not canceled: ${describeError(error)}`;
        yes.disabled = no.disabled = false;
      }
    });
    return h(
      "div",
      { class: "cancel-zone" },
      h("p", { class: "hint" }, "Stop this task for good:"),
      h("div", { class: "actions" }, cancel),
      confirm,
      result,
    );
  }

  function answerArea(state) {
    const question = messageText(task.status?.message);
    const request = elicitationOf(task.status?.message, ELICITATION_KEY);
    const accepted = (answer) => {
      if (answer.task) adopt(answer.task);
    };
    if (request && state === "TASK_STATE_INPUT_REQUIRED") {
      const sender = new Sender();
      return elicitationForm(request, async (action, content) => {
        try {
          const answer = await sender.send(elicitationParts(action, content), {
            taskId,
            extensions: [ELICITATION_URI],
          });
          accepted(answer);
          return "Sent.";
        } catch (error) {
          if (!worthRetrying(error)) sender.forget();
          return notSent(error, { what: "answer", button: action === "accept" ? "Send answer" : "Decline" });
        }
      });
    }
    const lead = state === "TASK_STATE_AUTH_REQUIRED" ? "The agent needs you to authenticate:" : "The agent asks:";
    return h(
      "div",
      { class: "question" },
      h("p", {}, h("strong", {}, lead), " ", question || "(no question text)"),
      composer({ taskId, onAnswer: accepted, heading: "Your answer" }),
    );
  }

  // Answers can arrive out of order (a read started before an event may land after it):
  // a Task whose status is older than the one shown is never adopted.
  function adopt(fresh) {
    const shown = Date.parse(task?.status?.timestamp ?? "");
    if (Date.parse(fresh.status?.timestamp ?? "") < shown) return;
    task = fresh;
    render();
  }

  // A status event carries the status; the durable Task carries the history it implies.
  let again = false;
  function refreshSoon() {
    if (refreshing) {
      again = true;
      return refreshing;
    }
    refreshing = (async () => {
      do {
        again = false;
        try {
          adopt(await getTask(taskId, controller.signal));
        } catch {
          // the stream (or the next reconnect) brings the state anyway
        }
      } while (again && !controller.signal.aborted);
      refreshing = null;
    })();
    return refreshing;
  }

  function apply({ type, data }) {
    if (type === "error" || data.error) throw StreamInterrupted.fromFrame(data.error);
    if (data.task) return adopt(data.task);
    if (data.statusUpdate) {
      task = { ...task, status: data.statusUpdate.status };
      refreshSoon();
    } else if (data.artifactUpdate) {
      const update = data.artifactUpdate;
      const list = [...(task.artifacts ?? [])];
      const at = list.findIndex((a) => a.artifactId === update.artifact.artifactId);
      if (at < 0) list.push(update.artifact);
      else if (update.append) list[at] = { ...list[at], parts: [...list[at].parts, ...update.artifact.parts] };
      else list[at] = update.artifact;
      task = { ...task, artifacts: list };
    } else return;
    render();
  }

  async function follow() {
    let delay = FIRST_RETRY_MS;
    let recovering = false;
    while (!controller.signal.aborted) {
      try {
        adopt(await getTask(taskId, controller.signal));
        if (TERMINAL.has(task.status.state)) {
          live.textContent = recovering
            ? "Reconnected: read the task again; it has finished, so there is nothing to follow."
            : "Finished: nothing more will change.";
          if (recovering) note("Read the task again after the interruption: it has finished.");
          return;
        }
        let opened = false;
        await subscribe(
          taskId,
          (event) => {
            apply(event); // an error frame throws here: the stream never counted as open
            if (!opened) {
              opened = true;
              delay = FIRST_RETRY_MS;
              live.textContent = recovering
                ? "Live again: read the task, then subscribed again."
                : "Live: following updates as they happen.";
              if (recovering) note("Reconnected: read the task again and subscribed again.");
              recovering = false;
            }
          },
          controller.signal,
        );
        if (TERMINAL.has(task.status?.state)) {
          live.textContent = "Finished: nothing more will change.";
          await refreshSoon();
          return;
        }
        throw new StreamInterrupted("the stream ended before the task finished");
      } catch (error) {
        if (controller.signal.aborted || error.name === "AbortError") return;
        if (error instanceof ApiError && error.status === 404) {
          fill(statusBox, h("p", { class: "form-error" }, "No such task: it does not exist or is not yours."));
          live.textContent = "";
          heading.textContent = "Task not found";
          return;
        }
        if (error instanceof ApiError && error.status === 401) return;
        if (error instanceof ApiError && error.status === 400 && error.reason === "UNSUPPORTED_OPERATION") {
          // It finished between the read and the subscribe: read it to show how it ended.
          await refreshSoon();
          if (TERMINAL.has(task?.status?.state)) {
            live.textContent = "Finished: nothing more will change.";
            return;
          }
        }
        const why =
          error instanceof StreamInterrupted || error instanceof Unreachable || error instanceof ApiError
            ? describeError(error)
            : "the connection dropped.";
        note(`Stream interrupted: ${why}`, error instanceof StreamInterrupted ? error.technical : null);
        recovering = true;
        live.textContent = `Interrupted: ${why} Reconnecting in ${Math.round(delay / 100) / 10} s…`;
      }
      try {
        await sleep(delay, controller.signal);
      } catch {
        return;
      }
      delay = Math.min(delay * 2, LAST_RETRY_MS);
    }
  }

  follow();
  return () => {
    controller.abort();
    downloads.revokeAll();
  };
}

/** A stream that ended early; `technical` is the server's own message, if it sent one. */
class StreamInterrupted extends Error {
  constructor(message, technical = null) {
    super(message);
    this.name = "StreamInterrupted";
    this.technical = technical;
  }

  /**
   * From a stream's error frame (a google.rpc.Status): a sentence for people, and the
   * server's message (written for API clients) kept as the technical detail.
   */
  static fromFrame(error) {
    const human =
      error?.status === "UNAVAILABLE" || error?.code === 503
        ? "The server stopped the live updates (it is shutting down, restarting or catching up)."
        : "The server ended the live updates with an error.";
    return new StreamInterrupted(human, error?.message ?? null);
  }
}
