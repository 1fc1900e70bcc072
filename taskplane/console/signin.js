// Sign in: the token is checked with one small API call before it is kept.
import { ApiError, call, readToken, signIn } from "./api.js";
import { describeError } from "./composer.js";
import { h } from "./dom.js";

/** Why a sign-in failed, as a sentence. */
function refusal(failure) {
  if (failure instanceof ApiError && failure.status === 401) {
    return "That token was not accepted: the server does not know it. Check it and try again.";
  }
  if (failure instanceof ApiError && failure.status === 431) {
    // The server refused the request's headers as too large: only the token can be.
    return "That token is far too long to be a valid token. Check that you pasted only the token.";
  }
  return `Could not sign in: ${describeError(failure)}`;
}

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
      "Your bearer token from the server's credentials file (with or without the word " +
        "Bearer in front). It is kept in this tab only " +
        "(until you sign out or close it) and sent only to this server.",
    ),
    h("div", { class: "actions" }, button),
    error,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const { value: candidate, problem } = readToken(field.value);
    if (problem) {
      error.textContent = problem;
      field.setAttribute("aria-invalid", "true");
      field.focus();
      return;
    }
    field.removeAttribute("aria-invalid");
    button.disabled = true;
    error.textContent = "";
    try {
      await call("GET", "/tasks", { query: { pageSize: "1", historyLength: "0" }, bearer: candidate });
      signIn(candidate);
      onSignedIn();
    } catch (failure) {
      error.textContent = refusal(failure);
      field.focus();
    } finally {
      button.disabled = false;
    }
  });
  main.append(h("h1", { tabindex: "-1" }, "Sign in"), form);
  return () => {};
}

