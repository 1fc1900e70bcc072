// An elicitation/v1 requestedSchema as a form: a flat object of string, number, integer
// and boolean properties (strings may be an enum), with titles, descriptions, required
// marks and validation before anything is sent.
import { h, uid } from "./dom.js";

/** The elicitation/v1 request in an agent message, `{message, requestedSchema}`, or null. */
export function elicitationOf(message, key = "elicitation/v1") {
  for (const part of message?.parts ?? []) {
    const request = part.data?.[key];
    if (request && typeof request.requestedSchema === "object") return request;
  }
  return null;
}

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
const DATE = /^\d{4}-\d{2}-\d{2}$/;

function control(name, spec, required, ids) {
  const common = {
    id: ids.control,
    name,
    "aria-describedby": `${ids.description} ${ids.error}`,
    required: required || undefined,
  };
  if (spec.type === "boolean") {
    return h("input", { ...common, type: "checkbox", checked: spec.default === true });
  }
  if (spec.type === "string" && Array.isArray(spec.enum)) {
    const options = spec.enum.map((value, i) =>
      h("option", { value, selected: spec.default === value }, spec.enumNames?.[i] ?? value),
    );
    const none = spec.default === undefined ? h("option", { value: "" }, "Choose one") : null;
    return h("select", common, none, options);
  }
  if (spec.type === "number" || spec.type === "integer") {
    return h("input", {
      ...common,
      type: "number",
      inputmode: spec.type === "integer" ? "numeric" : "decimal",
      step: spec.type === "integer" ? "1" : "any",
      min: spec.minimum,
      max: spec.maximum,
      value: spec.default,
    });
  }
  const types = { email: "email", uri: "url", date: "date" };
  return h("input", {
    ...common,
    type: types[spec.format] ?? "text",
    minlength: spec.minLength,
    maxlength: spec.maxLength,
    value: spec.default,
  });
}

/** Check one field; returns [value or undefined, error sentence or null]. */
export function checkField(spec, required, raw) {
  if (spec.type === "boolean") return [Boolean(raw), null];
  const text = String(raw ?? "").trim();
  if (text === "") return [undefined, required ? "This field is required." : null];
  if (spec.type === "number" || spec.type === "integer") {
    const value = Number(text);
    if (!Number.isFinite(value)) return [undefined, "Enter a number."];
    if (spec.type === "integer" && !Number.isInteger(value)) return [undefined, "Enter a whole number."];
    if (spec.minimum !== undefined && value < spec.minimum) return [undefined, `Enter ${spec.minimum} or more.`];
    if (spec.maximum !== undefined && value > spec.maximum) return [undefined, `Enter ${spec.maximum} or less.`];
    return [value, null];
  }
  if (Array.isArray(spec.enum) && !spec.enum.includes(text)) return [undefined, "Choose one of the options."];
  if (spec.minLength !== undefined && text.length < spec.minLength) {
    return [undefined, `Enter at least ${spec.minLength} characters.`];
  }
  if (spec.maxLength !== undefined && text.length > spec.maxLength) {
    return [undefined, `Enter at most ${spec.maxLength} characters.`];
  }
  if (spec.format === "email" && !EMAIL.test(text)) return [undefined, "Enter an email address."];
  if (spec.format === "uri") {
    try {
      new URL(text);
    } catch {
      return [undefined, "Enter a full address (URI), such as https://example.com."];
    }
  }
  if (spec.format === "date" && !DATE.test(text)) return [undefined, "Enter a date (YYYY-MM-DD)."];
  if (spec.format === "date-time" && Number.isNaN(Date.parse(text))) {
    return [undefined, "Enter a date and time (e.g. 2026-01-31T12:00:00Z)."];
  }
  return [text, null];
}

/**
 * The form for `request` ({message, requestedSchema}). `onAnswer(action, content)` is
 * awaited on "accept" (with the checked content) and "decline"; it returns a status text.
 */
export function elicitationForm(request, onAnswer) {
  const schema = request.requestedSchema ?? {};
  const required = new Set(schema.required ?? []);
  const fields = [];
  const legendId = uid("question");
  const status = h("p", { class: "form-status", role: "status" });
  const body = Object.entries(schema.properties ?? {}).map(([name, spec]) => {
    const ids = { control: uid("field"), description: uid("desc"), error: uid("err") };
    const input = control(name, spec, required.has(name), ids);
    const error = h("p", { class: "field-error", id: ids.error });
    fields.push({ name, spec, input, error });
    const label = h(
      "label",
      { for: ids.control },
      spec.title || name,
      required.has(name) ? h("span", { class: "required" }, " (required)") : null,
    );
    const description = h("p", { class: "field-description", id: ids.description }, spec.description ?? "");
    const checkbox = spec.type === "boolean";
    return h(
      "div",
      { class: checkbox ? "field field-checkbox" : "field" },
      checkbox ? [input, label] : [label, input],
      description,
      error,
    );
  });
  const submit = h("button", { type: "submit" }, "Send answer");
  const decline = h("button", { type: "button", class: "secondary" }, "Decline");
  const form = h(
    "form",
    { class: "elicitation", novalidate: true, "aria-labelledby": legendId },
    h("h3", { id: legendId }, request.message || "The agent asks"),
    h("p", { class: "hint" }, "Fields marked (required) must be filled in."),
    body,
    h("div", { class: "actions" }, submit, decline),
    status,
  );
  async function answer(action, content) {
    submit.disabled = decline.disabled = true;
    status.textContent = "Sending…";
    try {
      status.textContent = await onAnswer(action, content);
    } finally {
      submit.disabled = decline.disabled = false;
    }
  }
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const content = {};
    let firstInvalid = null;
    let invalid = 0;
    for (const { name, spec, input, error } of fields) {
      const raw = spec.type === "boolean" ? input.checked : input.value;
      const [value, problem] = checkField(spec, required.has(name), raw);
      error.textContent = problem ?? "";
      if (problem) {
        input.setAttribute("aria-invalid", "true");
        invalid += 1;
        firstInvalid ??= input;
      } else {
        input.removeAttribute("aria-invalid");
        if (value !== undefined) content[name] = value;
      }
    }
    if (firstInvalid) {
      status.textContent = `Not sent: ${invalid} field${invalid > 1 ? "s need" : " needs"} attention.`;
      firstInvalid.focus();
      return;
    }
    answer("accept", content);
  });
  decline.addEventListener("click", () => answer("decline"));
  return form;
}
