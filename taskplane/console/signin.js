// Sign in: the token is checked with one small API call before it is kept.
import { ApiError, call, signIn } from "./api.js";
import { describeError } from "./composer.js";
import { h } from "./dom.js";

/** The sign-in view; `onSignedIn()` runs once a token was accepted. */
export function signInView(main, { onSignedIn, notice }) {
  const field = h("input", {
    id: "token",
    name: "token",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    "data-autofocus": true,
    "aria-describedby": "token-help sign-in-error",
  });
  const error = h("p", { id: "sign-in-error", class: "form-error", role: "alert" }, notice ?? "");
  const button = h("button", { type: "submit" }, "Sign in");
  const form = h(
    "form",
    { class: "sign-in", novalidate: true },
    h("label", { for: "token" }, "Token"),
    field,
    h(
      "p",
      { id: "token-help", class: "hint" },
      "Your bearer token from the server's credentials file. It is kept in this tab only " +
        "(until you sign out or close it) and sent only to this server.",
    ),
    h("div", { class: "actions" }, button),
    error,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const candidate = field.value.trim();
    if (!candidate) {
      error.textContent = "Enter your token.";
      field.focus();
      return;
    }
    button.disabled = true;
    error.textContent = "";
    try {
      await call("GET", "/tasks", { query: { pageSize: "1", historyLength: "0" }, bearer: candidate });
      signIn(candidate);
      onSignedIn();
    } catch (failure) {
      error.textContent =
        failure instanceof ApiError && failure.status === 401
          ? "That token was not accepted: the server does not know it. Check it and try again."
          : `Could not sign in: ${describeError(failure)}`;
      field.focus();
    } finally {
      button.disabled = false;
    }
  });
  main.append(h("h1", { tabindex: "-1" }, "Sign in"), form);
  return () => {};
}

