// The caller's Tasks, newest first, with filters and paging by the API's page tokens;
// and the composer that starts a new Task.
import { ApiError, listTasks } from "./api.js";
import { composer, describeError } from "./composer.js";
import { fill, h } from "./dom.js";
import { firstWords, messageText, timeOf } from "./parts.js";
import { STATES, stateBadge } from "./states.js";

const PAGE_SIZE = "20";

/** The Tasks view for `filters` ({state, context} from the URL). */
export function tasksView(main, { filters, navigate }) {
  const controller = new AbortController();
  const pages = [""]; // page tokens of the pages seen, the current one last
  let notice = "";
  const reply = h("div", { class: "reply", role: "status" });
  const newTask = composer({
    onAnswer(answer) {
      if (answer.task) navigate(`#/tasks/${encodeURIComponent(answer.task.id)}`);
      else if (answer.message) fill(reply, h("p", {}, h("strong", {}, "Agent: "), messageText(answer.message)));
    },
  });

  const stateSelect = h(
    "select",
    { id: "filter-state", name: "state" },
    h("option", { value: "" }, "All states"),
    Object.entries(STATES).map(([value, { label }]) =>
      h("option", { value, selected: filters.state === value }, label),
    ),
  );
  const contextField = h("input", {
    id: "filter-context",
    name: "context",
    type: "text",
    value: filters.context ?? "",
    spellcheck: "false",
  });
  const filterForm = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter tasks" },
    h("div", { class: "field" }, h("label", { for: "filter-state" }, "State"), stateSelect),
    h("div", { class: "field" }, h("label", { for: "filter-context" }, "Context"), contextField),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Apply filters")),
  );
  filterForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = new URLSearchParams();
    if (stateSelect.value) query.set("state", stateSelect.value);
    if (contextField.value.trim()) query.set("context", contextField.value.trim());
    const text = query.toString();
    navigate(text ? `#/tasks?${text}` : "#/tasks");
  });

  const summary = h("p", { class: "list-summary", role: "status" }, "Loading…");
  const rows = h("tbody");
  const previous = h("button", { type: "button", disabled: true }, "Previous page");
  const next = h("button", { type: "button", disabled: true }, "Next page");
  const refresh = h("button", { type: "button", class: "secondary" }, "Refresh");
  previous.addEventListener("click", () => {
    pages.pop();
    load();
  });
  next.addEventListener("click", () => {
    pages.push(next.dataset.token);
    load();
  });
  refresh.addEventListener("click", () => load());

  async function load() {
    const query = { pageSize: PAGE_SIZE, includeArtifacts: "false" };
    if (filters.state) query.status = filters.state;
    if (filters.context) query.contextId = filters.context;
    const pageToken = pages[pages.length - 1];
    if (pageToken) query.pageToken = pageToken;
    summary.textContent = "Loading…";
    try {
      const page = await listTasks(query, controller.signal);
      render(page);
    } catch (error) {
      if (error.name === "AbortError") return;
      if (error instanceof ApiError && error.status === 400 && pageToken) {
        // Page tokens live only as long as the server process: start again at page 1.
        pages.splice(1);
        notice = "That page is no longer available (the server restarted); this is the first page. ";
        return load();
      }
      summary.textContent = `Could not load the tasks: ${describeError(error)}`;
    }
  }

  function render(page) {
    const tasks = page.tasks ?? [];
    const start = (pages.length - 1) * Number(PAGE_SIZE);
    summary.textContent =
      notice +
      (tasks.length
        ? `Tasks ${start + 1}–${start + tasks.length} of ${page.totalSize ?? "?"}, newest first.`
        : "No tasks match.");
    notice = "";
    fill(
      rows,
      tasks.map((task) =>
        h(
          "tr",
          {},
          h(
            "td",
            { "data-label": "Request" },
            h("a", { href: `#/tasks/${encodeURIComponent(task.id)}` }, firstWords(task)),
            h("br"),
            h("code", { class: "id" }, task.id),
          ),
          h("td", { "data-label": "State" }, stateBadge(task.status?.state)),
          h("td", { "data-label": "Context" }, h("code", { class: "id" }, task.contextId ?? "—")),
          h("td", { "data-label": "Last update" }, timeOf(task.status?.timestamp)),
        ),
      ),
    );
    previous.disabled = pages.length <= 1;
    next.disabled = !page.nextPageToken;
    next.dataset.token = page.nextPageToken ?? "";
  }

  main.append(
    h("h1", { tabindex: "-1" }, "Tasks"),
    h("section", { "aria-labelledby": "new-task" }, h("h2", { id: "new-task" }, "New task"), newTask, reply),
    h(
      "section",
      { "aria-labelledby": "your-tasks" },
      h("h2", { id: "your-tasks" }, "Your tasks"),
      filterForm,
      summary,
      h(
        "table",
        { class: "tasks" },
        h("caption", { class: "visually-hidden" }, "Your tasks, newest first"),
        h(
          "thead",
          {},
          h("tr", {}, ["Request", "State", "Context", "Last update"].map((t) => h("th", { scope: "col" }, t))),
        ),
        rows,
      ),
      h("nav", { class: "pager", "aria-label": "Pages" }, previous, next, refresh),
    ),
  );
  load();
  return () => controller.abort();
}
