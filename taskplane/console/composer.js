// Sending messages. A new message gets a fresh messageId; sending the same message again
// after a failure reuses it, so a retry is never done twice (the server's idempotency).
import { ApiError, ELICITATION_URI, sendMessage, Unreachable } from "./api.js";
import { h, uid, uuid } from "./dom.js";

/** Remembers the messageId of a send that did not get an answer, for its retry. */
export class Sender {
  constructor() {
    this.pending = null;
  }

  /** Send `parts` (to `taskId` if given); `key` identifies the payload for retries. */
  async send(parts, { taskId, extensions } = {}) {
    const key = JSON.stringify([parts, taskId ?? null, extensions ?? []]);
    if (!this.pending || this.pending.key !== key) this.pending = { key, messageId: uuid() };
    const message = { messageId: this.pending.messageId, role: "ROLE_USER", parts };
    if (taskId) message.taskId = taskId;
    if (extensions) message.extensions = extensions;
    const answer = await sendMessage(message);
    this.pending = null;
    return answer;
  }

  get retrying() {
    return this.pending !== null;
  }

  /** Forget the pending send: the next send is a new message with a new ID. */
  forget() {
    this.pending = null;
  }
}

function sentence(text) {
  const trimmed = String(text).trim().replace(/[.;:,]+$/, "");
  return trimmed ? `${trimmed[0].toUpperCase()}${trimmed.slice(1)}` : "";
}

/**
 * A person-readable sentence for a failed call: the server's message, its reason once
 * (a status number is never repeated), and when to try again if the server said.
 */
export function describeError(error) {
  if (error instanceof Unreachable) return "The server did not answer.";
  if (error instanceof ApiError) {
    const reason = error.reason && !error.message.includes(error.reason) ? ` (${error.reason})` : "";
    const retry = error.retryAfter ? ` Try again in ${error.retryAfter} s.` : "";
    return `${sentence(error.message)}${reason}.${retry}`;
  }
  return String(error?.message ?? error);
}

/** Whether sending the same message again may succeed (no answer, 5xx, 408, 429). */
export function worthRetrying(error) {
  return error instanceof Unreachable || (error instanceof ApiError && error.retryable);
}

/**
 * "Not sent: ..." for a failed send of `what` ("message" or "answer") with the button
 * `button`: retry advice only when a retry may succeed; otherwise what to change.
 */
export function notSent(error, { what = "message", button = "Send" } = {}) {
  const why = describeError(error);
  if (worthRetrying(error)) {
    return (
      `Not sent: ${why} Press ${button} again to retry; the retry reuses the same ` +
      "message ID, so it is never done twice."
    );
  }
  if (error instanceof ApiError && error.status === 413) {
    return `Not sent: ${why} The ${what} is too large for the server: shorten it and send it again.`;
  }
  return `Not sent: ${why} Sending the same ${what} again would be refused the same way: change it first.`;
}

/**
 * The composer: a `Message` field and a `Send` button.
 * `onAnswer(answer)` gets `{task}` or `{message}` after a successful send.
 */
export function composer({ taskId, onAnswer, heading }) {
  const sender = new Sender();
  const fieldId = uid("message");
  const field = h("textarea", { id: fieldId, name: "message", rows: "3", required: true });
  const button = h("button", { type: "submit" }, "Send");
  const status = h("p", { class: "form-status", role: "status" });
  const form = h(
    "form",
    { class: "composer", novalidate: true },
    heading ? h("h3", {}, heading) : null,
    h("label", { for: fieldId }, "Message"),
    field,
    h("div", { class: "actions" }, button),
    status,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = field.value.trim();
    if (!text) {
      status.textContent = "Write a message first.";
      field.setAttribute("aria-invalid", "true");
      field.focus();
      return;
    }
    field.removeAttribute("aria-invalid");
    button.disabled = true;
    status.textContent = sender.retrying ? "Sending again (same message ID)…" : "Sending…";
    try {
      const answer = await sender.send([{ text }], { taskId });
      field.value = "";
      status.textContent = answer.message ? "" : "Sent.";
      onAnswer(answer);
    } catch (error) {
      if (!worthRetrying(error)) sender.forget();
      status.textContent = notSent(error);
    } finally {
      button.disabled = false;
    }
  });
  return form;
}

/** The elicitation/v1 answer message parts for `action` ("accept" or "decline"). */
export function elicitationParts(action, content) {
  const text =
    action === "accept"
      ? `Accepted requested input: ${JSON.stringify(content)}`
      : "Declined requested input.";
  const answer = action === "accept" ? { action, content } : { action };
  return [{ text }, { data: { "elicitation/v1": answer } }];
}

export { ELICITATION_URI };
