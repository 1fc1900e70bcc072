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
import { composer, describeError, elicitationParts, Sender } from "./composer.js";
import { fill, h, sleep } from "./dom.js";
import { elicitationForm, elicitationOf } from "./elicitation.js";
import { Downloads, messageText, renderArtifact, renderMessage, timeOf } from "./parts.js";
import { stateBadge, stateLabel, TERMINAL, WAITING } from "./states.js";

const FIRST_RETRY_MS = 500;
const LAST_RETRY_MS = 8000;
const CONNECTION_LOG = 6;

/** The view of Task `taskId`. Returns its cleanup (stops the stream). */
export function taskView(main, { taskId }) {
  const controller = new AbortController();
  const downloads = new Downloads();
  let task = null;
  let actionsKey = null;
  let refreshing = null;

  const heading = h("h1", { tabindex: "-1" }, "Task");
  const statusBox = h("div", { class: "status-box", "aria-live": "polite" });
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

  function note(text) {
    log.prepend(h("li", {}, timeOf(new Date().toISOString()), " ", text));
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
    heading.textContent = `Task: ${messageText(first).split(/\s+/).slice(0, 8).join(" ") || taskId}`;
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
    if (!TERMINAL.has(state)) {
      const cancel = h("button", { type: "button", class: "danger" }, "Cancel task");
      const result = h("p", { class: "form-status", role: "status" });
      cancel.addEventListener("click", async () => {
        cancel.disabled = true;
        result.textContent = "Canceling…";
        try {
          adopt(await cancelTask(taskId));
          result.textContent = "";
        } catch (error) {
          result.textContent = `Not canceled: ${describeError(error)}`;
          cancel.disabled = false;
        }
      });
      parts.push(h("div", { class: "actions" }, cancel), result);
    }
    fill(actions, parts.length ? h("section", { "aria-labelledby": "act-h" }, h("h2", { id: "act-h" }, "Act"), parts) : null);
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
          return `Not sent: ${describeError(error)} Send again to retry with the same message ID.`;
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
    if (type === "error" || data.error) {
      throw new StreamInterrupted(data.error?.message ?? "the stream reported an error");
    }
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
            if (!opened) {
              opened = true;
              delay = FIRST_RETRY_MS;
              live.textContent = recovering
                ? "Live again: read the task, then subscribed again."
                : "Live: following updates as they happen.";
              if (recovering) note("Reconnected: read the task again and subscribed again.");
              recovering = false;
            }
            apply(event);
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
        if (error instanceof ApiError && error.reason === "UNSUPPORTED_OPERATION") {
          continue; // it finished between the read and the subscribe: read it again
        }
        const why =
          error instanceof StreamInterrupted || error instanceof Unreachable || error instanceof ApiError
            ? describeError(error)
            : "the connection dropped.";
        note(`Stream interrupted: ${why}`);
        recovering = true;
        live.textContent = `Interrupted (${why}) Reconnecting in ${Math.round(delay / 100) / 10} s…`;
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

class StreamInterrupted extends Error {
  constructor(message) {
    super(message);
    this.name = "StreamInterrupted";
  }
}
