// Task states: a word and a symbol for each, so colour is never the only signal.
import { h } from "./dom.js";

export const STATES = {
  TASK_STATE_SUBMITTED: { label: "Submitted", symbol: "◷" },
  TASK_STATE_WORKING: { label: "Working", symbol: "⟳" },
  TASK_STATE_INPUT_REQUIRED: { label: "Input required", symbol: "?" },
  TASK_STATE_AUTH_REQUIRED: { label: "Auth required", symbol: "!" },
  TASK_STATE_COMPLETED: { label: "Completed", symbol: "✓" },
  TASK_STATE_FAILED: { label: "Failed", symbol: "✗" },
  TASK_STATE_CANCELED: { label: "Canceled", symbol: "⊘" },
  TASK_STATE_REJECTED: { label: "Rejected", symbol: "⊗" },
};

export const TERMINAL = new Set([
  "TASK_STATE_COMPLETED",
  "TASK_STATE_FAILED",
  "TASK_STATE_CANCELED",
  "TASK_STATE_REJECTED",
]);

export const WAITING = new Set(["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"]);

/** The person-readable name of `state`. */
export function stateLabel(state) {
  return STATES[state]?.label ?? state ?? "Unknown";
}

/** A badge: symbol (hidden from screen readers) and word, coloured by a state class. */
export function stateBadge(state) {
  const known = STATES[state];
  const slug = (state ?? "unknown").replace("TASK_STATE_", "").toLowerCase().replace("_", "-");
  return h(
    "span",
    { class: `state state-${slug}` },
    h("span", { class: "state-symbol", "aria-hidden": "true" }, known?.symbol ?? "•"),
    " ",
    stateLabel(state),
  );
}
