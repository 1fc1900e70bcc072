// Message and artifact parts: text as text, data as formatted JSON, files as download links.
import { ELICITATION_KEY, OUTFITTER_TASK_KEY } from "./api.js";
import { h, timeOf } from "./dom.js";

/** Object URLs made for inline files; revoke them when the view goes away. */
export class Downloads {
  constructor() {
    this.urls = new Map();
  }

  urlFor(raw, mediaType) {
    const key = `${mediaType}\u0000${raw}`;
    if (!this.urls.has(key)) {
      const bytes = Uint8Array.from(atob(raw), (c) => c.charCodeAt(0));
      const type = mediaType || "application/octet-stream";
      this.urls.set(key, { url: URL.createObjectURL(new Blob([bytes], { type })), size: bytes.length });
    }
    return this.urls.get(key);
  }

  revokeAll() {
    for (const { url } of this.urls.values()) URL.revokeObjectURL(url);
    this.urls.clear();
  }
}

function safeUrl(value) {
  try {
    const url = new URL(value, location.href);
    return url.protocol === "https:" || url.protocol === "http:" ? url.href : null;
  } catch {
    return null;
  }
}

/** Data parts longer than this many lines are shown collapsed. */
const DATA_LINES_SHOWN = 12;

/** A data part: formatted JSON, behind a disclosure when it is a question's schema or long. */
function renderData(data) {
  const json = JSON.stringify(data, null, 2) ?? String(data);
  const code = h("pre", { tabindex: "0" }, h("code", {}, json));
  const lines = json.split("\n").length;
  const schema = typeof data?.[ELICITATION_KEY]?.requestedSchema === "object";
  if (!schema && lines <= DATA_LINES_SHOWN) {
    return h("figure", { class: "part-data" }, h("figcaption", {}, "Data"), code);
  }
  const label = schema
    ? "Data: the question's form (elicitation/v1 schema)"
    : `Data (${lines} lines of JSON)`;
  return h("details", { class: "part-data" }, h("summary", {}, label), code);
}

/** One part as DOM. */
export function renderPart(part, downloads) {
  if (typeof part.text === "string") return h("p", { class: "part-text" }, part.text);
  if (part.data !== undefined) return renderData(part.data);
  const name = part.filename || "file";
  const type = part.mediaType ? ` (${part.mediaType})` : "";
  if (typeof part.raw === "string") {
    try {
      const { url, size } = downloads.urlFor(part.raw, part.mediaType);
      return h(
        "p",
        { class: "part-file" },
        h("a", { href: url, download: name }, `Download ${name}`),
        `${type}, ${size} bytes`,
      );
    } catch {
      return h("p", { class: "part-file" }, `${name}${type}: the file's bytes could not be read`);
    }
  }
  if (typeof part.url === "string") {
    const href = safeUrl(part.url);
    if (!href) return h("p", { class: "part-file" }, `${name}${type} at ${part.url} (not a web link)`);
    return h(
      "p",
      { class: "part-file" },
      h("a", { href, download: name, rel: "noopener noreferrer" }, `Download ${name}`),
      `${type} from ${href}`,
    );
  }
  return h("pre", { class: "part-data" }, JSON.stringify(part, null, 2));
}

const ROLES = { ROLE_USER: "You", ROLE_AGENT: "Agent" };

/** One history message: who, then its parts. */
export function renderMessage(message, downloads) {
  return h(
    "li",
    { class: `message message-${message.role === "ROLE_AGENT" ? "agent" : "user"}` },
    h("p", { class: "message-role" }, ROLES[message.role] ?? message.role ?? "?"),
    (message.parts ?? []).map((part) => renderPart(part, downloads)),
  );
}

/** One artifact: its name, the outfitter-task/v1 output name and type if any, its parts. */
export function renderArtifact(artifact, downloads) {
  const output = artifact.metadata?.[OUTFITTER_TASK_KEY];
  return h(
    "li",
    { class: "artifact" },
    h(
      "p",
      { class: "artifact-name" },
      h("strong", {}, artifact.name || artifact.artifactId),
      output ? ` — output ${output.output ?? "?"} of type ${output.type ?? "?"}` : "",
    ),
    artifact.description ? h("p", {}, artifact.description) : null,
    (artifact.parts ?? []).map((part) => renderPart(part, downloads)),
  );
}

/** The text of a message's text parts, joined. */
export function messageText(message) {
  return (message?.parts ?? [])
    .filter((p) => typeof p.text === "string")
    .map((p) => p.text)
    .join("\n");
}

/**
 * `text` on one line, at most `words` words and `chars` characters (an ellipsis ends
 * what was cut), so unbroken text (a long URL, a run of one letter) is shortened too.
 */
export function shorten(text, { words = Infinity, chars = 80 } = {}) {
  const all = text.replace(/\s+/g, " ").trim();
  let short = all.split(" ").slice(0, words).join(" ");
  if (short.length > chars) short = short.slice(0, chars - 1).trimEnd();
  return short.length < all.length ? `${short}…` : short;
}

/** The first words of a Task's request (its first user message), at most `limit` characters. */
export function firstWords(task, limit = 80) {
  const first = (task.history ?? []).find((m) => m.role === "ROLE_USER");
  const text = messageText(first).replace(/\s+/g, " ").trim();
  if (!text) return first ? "(no text)" : "(history not shown)";
  return shorten(text, { chars: limit });
}

export { timeOf };
