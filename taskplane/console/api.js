// The public A2A HTTP+JSON API, as the signed-in person. The bearer token lives in this
// tab's sessionStorage only; it is sent in the Authorization header, never in a URL.
import { readEvents } from "./sse.js";

export const ELICITATION_URI =
  "https://github.com/ai-outfitter/channels/a2a-extensions/elicitation/v1";
export const ELICITATION_KEY = "elicitation/v1";
export const OUTFITTER_TASK_URI =
  "https://github.com/ai-outfitter/channels/a2a-extensions/outfitter-task/v1";
export const OUTFITTER_TASK_KEY = "outfitter-task/v1";
/** Activated on every send, so questions come with their schema and outputs with their URI. */
const EXTENSIONS = [ELICITATION_URI, OUTFITTER_TASK_URI].join(", ");
const TOKEN_KEY = "taskplane.console.token";

/** Fired (as "unauthenticated") when the server refuses the stored token. */
export const session = new EventTarget();

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** RFC 9110 credentials: a bearer token is visible ASCII only, as the server requires. */
const TOKEN_CHARACTERS = /^[\x21-\x7e]+$/;

/**
 * The token in what a person typed or pasted: trimmed, without a leading `Bearer `
 * (any case). Returns `{value}`, or `{problem}` (a sentence) for text that cannot be a
 * token: characters an HTTP header cannot carry (letters with accents, symbols, emoji,
 * spaces) would otherwise fail in the browser before any request is sent.
 */
export function readToken(typed) {
  const value = typed.trim().replace(/^bearer\s+/i, "").trim();
  if (!value) return { problem: "Enter your token." };
  if (!TOKEN_CHARACTERS.test(value)) {
    return {
      problem:
        "That is not a valid token: a token has only letters A–Z, digits and ASCII " +
        "punctuation, and this text has other characters (accents, symbols, emoji or spaces).",
    };
  }
  return { value };
}

export function signIn(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/**
 * An error answer: the HTTP status and the google.rpc.Status `reason` and `message`.
 * An answer without a google.rpc.Status body (a proxy's, or the HTTP layer's such as
 * 431) has the message "the server answered HTTP <status>" and no reason.
 */
export class ApiError extends Error {
  constructor(status, body) {
    const error = body?.error ?? {};
    const info = (error.details ?? []).find((d) => d["@type"]?.endsWith("ErrorInfo"));
    super(error.message ?? `the server answered HTTP ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.reason = info?.reason ?? error.status ?? null;
    this.retryAfter = null;
  }

  /**
   * Whether sending the same request again may succeed: 5xx, 408 (timeout) and 429
   * (too many requests). Any other 4xx answers the same request the same way.
   */
  get retryable() {
    return this.status >= 500 || this.status === 408 || this.status === 429;
  }
}

/** The server could not be reached (down, restarting, or the network dropped). */
export class Unreachable extends Error {
  constructor(cause) {
    super("the server did not answer");
    this.name = "Unreachable";
    this.cause = cause;
  }
}

function headers(extra, bearer) {
  const result = { "A2A-Version": "1.0", ...extra };
  const value = bearer ?? token();
  if (value) result.Authorization = `Bearer ${value}`;
  return result;
}

async function exchange(path, init, { bearer, quiet } = {}) {
  let response;
  try {
    response = await fetch(path, { cache: "no-store", credentials: "omit", ...init });
  } catch (cause) {
    if (cause?.name === "AbortError") throw cause;
    throw new Unreachable(cause);
  }
  if (response.ok) return response;
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  const error = new ApiError(response.status, body);
  error.retryAfter = response.headers.get("Retry-After");
  if (response.status === 401 && !quiet && !bearer) {
    session.dispatchEvent(new Event("unauthenticated"));
  }
  throw error;
}

/**
 * A JSON call. `query` becomes the URL's query string (never the token); `body` is sent
 * as JSON. `bearer` tries a token other than the stored one (sign in), quietly.
 */
export async function call(method, path, { query, body, bearer, signal } = {}) {
  const extra = { Accept: "application/json" };
  const init = { method, signal };
  if (body !== undefined) {
    extra["Content-Type"] = "application/json";
    extra["A2A-Extensions"] = EXTENSIONS;
    init.body = JSON.stringify(body);
  }
  init.headers = headers(extra, bearer);
  const url = query ? `${path}?${new URLSearchParams(query)}` : path;
  const response = await exchange(url, init, { bearer, quiet: bearer !== undefined });
  return response.json();
}

const taskPath = (id) => `/tasks/${encodeURIComponent(id)}`;

export const listTasks = (query, signal) => call("GET", "/tasks", { query, signal });
export const getTask = (id, signal) => call("GET", taskPath(id), { signal });
export const cancelTask = (id) => call("POST", `${taskPath(id)}:cancel`, { body: {} });

/** POST /message:send without waiting for the Task to settle: `{task}` or `{message}`. */
export const sendMessage = (message) =>
  call("POST", "/message:send", {
    body: { message, configuration: { returnImmediately: true } },
  });

/**
 * Subscribe to a Task: GET /tasks/{id}:subscribe read with fetch streaming.
 * Calls `onEvent({type, data})` per event; resolves when the server ends the stream,
 * rejects with ApiError (refused), Unreachable or a network error (dropped).
 */
export async function subscribe(id, onEvent, signal) {
  const init = { method: "GET", signal, headers: headers({ Accept: "text/event-stream" }) };
  const response = await exchange(`${taskPath(id)}:subscribe`, init);
  await readEvents(response, onEvent);
}

/** A public operational read (no token needed): `/readyz` or `/metrics`, or the card. */
export async function publicRead(path, signal) {
  let response;
  try {
    response = await fetch(path, { cache: "no-store", credentials: "omit", signal });
  } catch (cause) {
    if (cause?.name === "AbortError") throw cause;
    throw new Unreachable(cause);
  }
  return { status: response.status, text: await response.text() };
}
