// The official A2A JavaScript SDK client (@a2a-js/sdk), unmodified, against a running
// taskplane server, over one binding. Driven by tests/e2e/test_a2a_js_client.py.
//
//   node scenarios.mjs <base-url> <bearer-token> <JSONRPC|HTTP+JSON>
//
// Runs every scenario in order and prints one JSON line per scenario:
// {"scenario": name, "ok": true} or {"scenario": name, "ok": false, "error": "..."}.
// The exit status is 0 when every scenario passed, 1 otherwise.

import { randomUUID } from "node:crypto";

import { Role, SendMessageRequest, TaskState } from "@a2a-js/sdk";
import {
  ClientFactory,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from "@a2a-js/sdk/client";
import {
  TaskNotCancelableError,
  TaskNotFoundError,
  UnsupportedOperationError,
} from "@a2a-js/sdk/errors";

const [baseUrl, token, binding] = process.argv.slice(2);
const TERMINAL = new Set([
  TaskState.TASK_STATE_COMPLETED,
  TaskState.TASK_STATE_FAILED,
  TaskState.TASK_STATE_CANCELED,
  TaskState.TASK_STATE_REJECTED,
]);
const paths = []; // every path this client called, to check which binding it spoke

async function authorizedFetch(input, init = {}) {
  const headers = new Headers(init.headers);
  headers.set("Authorization", `Bearer ${token}`);
  paths.push(new URL(typeof input === "string" ? input : input.url).pathname);
  return fetch(input, { ...init, headers });
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

function request(text, extra = {}, configuration = undefined) {
  const message = {
    messageId: `js-${randomUUID()}`,
    role: "ROLE_USER",
    parts: [{ text }],
    ...extra,
  };
  return SendMessageRequest.fromJSON(configuration ? { message, configuration } : { message });
}

function isTask(result) {
  return result !== undefined && result.status !== undefined && result.role === undefined;
}

function textOf(parts) {
  return parts.map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");
}

function stateOf(frame) {
  const payload = frame.payload;
  if (payload?.$case === "task") return payload.value.status?.state;
  if (payload?.$case === "statusUpdate") return payload.value.status?.state;
  return undefined;
}

async function collect(stream) {
  const frames = [];
  for await (const frame of stream) frames.push(frame);
  return frames;
}

async function sendTask(client, req) {
  const result = await client.sendMessage(req);
  check(isTask(result), `expected a Task, got ${JSON.stringify(result)}`);
  return result;
}

async function pollUntil(client, id, states) {
  const deadline = Date.now() + 15000;
  for (;;) {
    const task = await client.getTask({ id, tenant: "" });
    if (states.has(task.status.state)) return task;
    check(Date.now() < deadline, `task ${id} stayed in state ${task.status.state}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function rejects(promise, errorClass, pattern) {
  try {
    await promise;
  } catch (error) {
    if (errorClass !== undefined) {
      check(error instanceof errorClass, `expected ${errorClass.name}, got ${error}`);
    }
    if (pattern !== undefined) {
      check(pattern.test(String(error)), `expected ${pattern}, got ${error}`);
    }
    return error;
  }
  throw new Error("expected the call to fail");
}

const scenarios = {
  async card_and_binding(client) {
    const task = await sendTask(client, request("which binding"));
    check(task.status.state === TaskState.TASK_STATE_COMPLETED, `state ${task.status.state}`);
    const called = paths.filter((p) => !p.startsWith("/.well-known/"));
    const jsonrpc = called.every((p) => p === "/");
    check(
      binding === "JSONRPC" ? jsonrpc : !called.includes("/"),
      `binding ${binding} but the client called ${called}`,
    );
  },

  async blocking_send(client) {
    const req = request("hello from js");
    const task = await sendTask(client, req);
    check(task.status.state === TaskState.TASK_STATE_COMPLETED, `state ${task.status.state}`);
    check(task.history[0].messageId === req.message.messageId, "history[0] is our message");
    const texts = task.artifacts.map((a) => textOf(a.parts));
    check(JSON.stringify(texts) === JSON.stringify(["hello from js"]), `artifacts ${texts}`);
  },

  async direct_reply(client) {
    const reply = await client.sendMessage(request("ping"));
    check(reply.role === Role.ROLE_AGENT, `a direct reply, got ${JSON.stringify(reply)}`);
    check(textOf(reply.parts) === "pong", `pong, got ${textOf(reply.parts)}`);
  },

  async non_blocking_send(client) {
    const task = await sendTask(client, request("sleep: 500", {}, { returnImmediately: true }));
    check(!TERMINAL.has(task.status.state), `still active, got ${task.status.state}`);
    const done = await pollUntil(client, task.id, TERMINAL);
    check(done.status.state === TaskState.TASK_STATE_COMPLETED, `state ${done.status.state}`);
  },

  async stream(client) {
    const frames = await collect(client.sendMessageStream(request("sleep: 200")));
    check(frames[0].payload?.$case === "task", `first frame ${frames[0].payload?.$case}`);
    const states = frames.map(stateOf).filter((s) => s !== undefined);
    check(states.at(-1) === TaskState.TASK_STATE_COMPLETED, `states ${states}`);
    const taskId = frames[0].payload.value.id;
    for (const frame of frames.slice(1)) {
      check(frame.payload.value.taskId === taskId, "every update is about the task");
    }
  },

  async get_with_history_length(client) {
    const task = await sendTask(client, request("get me"));
    const got = await client.getTask({ id: task.id, tenant: "", historyLength: 0 });
    check(got.id === task.id && got.history.length === 0, `history ${got.history.length}`);
    await rejects(client.getTask({ id: `no-such-${randomUUID()}`, tenant: "" }), TaskNotFoundError);
  },

  async list(client) {
    const first = await sendTask(client, request("listed"));
    const listed = await client.listTasks({
      tenant: "",
      contextId: first.contextId,
      status: TaskState.TASK_STATE_COMPLETED,
      pageSize: 10,
    });
    check(listed.tasks.length === 1 && listed.tasks[0].id === first.id, "one task listed");
    check(listed.totalSize === 1, `totalSize ${listed.totalSize}`);
  },

  async cancel(client) {
    const task = await sendTask(client, request("sleep: 10000", {}, { returnImmediately: true }));
    const canceled = await client.cancelTask({ id: task.id, tenant: "" });
    check(canceled.status.state === TaskState.TASK_STATE_CANCELED, `${canceled.status.state}`);
    await rejects(client.cancelTask({ id: task.id, tenant: "" }), TaskNotCancelableError);
  },

  async subscribe(client) {
    const task = await sendTask(client, request("sleep: 800", {}, { returnImmediately: true }));
    const frames = await collect(client.resubscribeTask({ id: task.id, tenant: "" }));
    check(frames[0].payload?.$case === "task", `first frame ${frames[0].payload?.$case}`);
    const states = frames.map(stateOf).filter((s) => s !== undefined);
    check(states.at(-1) === TaskState.TASK_STATE_COMPLETED, `states ${states}`);
    await rejects(
      collect(client.resubscribeTask({ id: task.id, tenant: "" })),
      UnsupportedOperationError,
      /terminal/,
    );
  },

  async input_required_then_answer(client) {
    const asked = await sendTask(client, request("ask: which colour?"));
    check(asked.status.state === TaskState.TASK_STATE_INPUT_REQUIRED, `${asked.status.state}`);
    check(textOf(asked.status.message.parts) === "which colour?", "the question");
    const answered = await sendTask(client, request("blue", { taskId: asked.id }));
    check(answered.id === asked.id, "the same task");
    check(answered.status.state === TaskState.TASK_STATE_COMPLETED, `${answered.status.state}`);
    const texts = answered.artifacts.map((a) => textOf(a.parts));
    check(texts[0] === "You answered: blue", `artifacts ${texts}`);
  },

  async duplicate_and_conflict(client) {
    const req = request("exactly once from js");
    const first = await sendTask(client, req);
    const again = await sendTask(client, req);
    check(again.id === first.id, "a duplicate gets the same task");
    const changed = request("another payload");
    changed.message.messageId = req.message.messageId;
    // The SDK has no class for DUPLICATE_MESSAGE_ID: a generic error with our message.
    await rejects(client.sendMessage(changed), undefined, /already used with a different payload/);
  },
};

const factory = new ClientFactory({
  transports: [
    new JsonRpcTransportFactory({ fetchImpl: authorizedFetch }),
    new RestTransportFactory({ fetchImpl: authorizedFetch }),
  ],
  preferredTransports: [binding],
});
const client = await factory.createFromUrl(baseUrl);
let failed = 0;
for (const [name, scenario] of Object.entries(scenarios)) {
  try {
    await scenario(client);
    console.log(JSON.stringify({ scenario: name, ok: true }));
  } catch (error) {
    failed += 1;
    const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    console.log(JSON.stringify({ scenario: name, ok: false, error: text }));
  }
}
process.exit(failed === 0 ? 0 : 1);
