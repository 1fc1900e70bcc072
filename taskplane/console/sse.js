// Server-sent events read from a fetch() body: an EventSource cannot send the bearer token.
// Framing (docs/http-api.md, Streaming): "data: <JSON>" lines, a blank line ends an event,
// "event: error" marks the error frame, lines starting with ":" are keep-alive comments.

/** Incremental parser: push() text chunks, get back complete events {type, data}. */
export class SseParser {
  constructor() {
    this.buffer = "";
  }

  /** Parse `chunk`; returns the events it completed. */
  push(chunk) {
    this.buffer += chunk.replace(/\r\n?/g, "\n");
    const events = [];
    let end;
    while ((end = this.buffer.indexOf("\n\n")) >= 0) {
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      const event = parseBlock(block);
      if (event) events.push(event);
    }
    return events;
  }
}

function parseBlock(block) {
  let type = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") type = value;
    else if (field === "data") data.push(value);
  }
  if (data.length === 0) return null;
  try {
    return { type, data: JSON.parse(data.join("\n")) };
  } catch {
    return { type: "error", data: { error: { message: "an event was not valid JSON" } } };
  }
}

/**
 * Read an SSE `response` to its end, calling `onEvent({type, data})` for each event.
 * Resolves when the server closes the stream; rejects when the connection drops or
 * `onEvent` throws (the stream is then cancelled).
 */
export async function readEvents(response, onEvent) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new SseParser();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      for (const event of parser.push(value)) onEvent(event);
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}
