// The console's router: #/tasks (with ?state= and ?context=), #/tasks/<id>, #/operator.
// Without a token in this tab every route shows the sign-in first.
import { session, signOut, token } from "./api.js";
import { operatorView } from "./operator.js";
import { signInView } from "./signin.js";
import { taskView } from "./task.js";
import { tasksView } from "./tasks.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
let cleanup = () => {};
let notice = null;

function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function parse(hash) {
  const [path, query = ""] = hash.slice(1).split("?");
  const params = new URLSearchParams(query);
  const task = /^\/tasks\/([^/]+)$/.exec(path);
  if (task) return { view: "task", taskId: decodeURIComponent(task[1]) };
  if (path === "/operator") return { view: "operator" };
  return { view: "tasks", filters: { state: params.get("state") ?? "", context: params.get("context") ?? "" } };
}

function route() {
  // "#main" and other plain fragments are in-page jumps (the skip link), not routes.
  if (location.hash && !location.hash.startsWith("#/")) return;
  cleanup();
  main.replaceChildren();
  const signedIn = Boolean(token());
  nav.hidden = !signedIn;
  const place = parse(location.hash || "#/tasks");
  for (const link of nav.querySelectorAll("a")) {
    const current = link.getAttribute("href") === (place.view === "operator" ? "#/operator" : "#/tasks");
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (!signedIn) {
    document.title = "Sign in · taskplane console";
    cleanup = signInView(main, { onSignedIn: route, notice });
    notice = null;
  } else if (place.view === "task") {
    document.title = "Task · taskplane console";
    cleanup = taskView(main, { taskId: place.taskId });
  } else if (place.view === "operator") {
    document.title = "Operator · taskplane console";
    cleanup = operatorView(main);
  } else {
    document.title = "Tasks · taskplane console";
    cleanup = tasksView(main, { filters: place.filters, navigate });
  }
  // Move focus to the new view (its first field if it asks for one), for keyboard users.
  (main.querySelector("[data-autofocus]") ?? main.querySelector("h1"))?.focus();
}

document.getElementById("sign-out").addEventListener("click", () => {
  signOut();
  notice = "Signed out. The token was removed from this tab.";
  route();
});

session.addEventListener("unauthenticated", () => {
  signOut();
  notice = "The server no longer accepts your token. Sign in again.";
  route();
});

window.addEventListener("hashchange", route);
route();

