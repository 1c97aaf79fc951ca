// The tidegate console: plain ES modules over the gateway's own APIs (docs/console.md), no framework;
// the charts are uPlot's (vendor/). This module logs in and routes the hash to a page.

import { api, el, forgetKeyNames, hasSession, here, leave, main, onUnauthorized, setSession, show } from "./lib.js";
import { overviewView } from "./overview.js";
import { keysView, keyView } from "./keys.js";
import { routesView } from "./routes.js";
import { logView, logsView } from "./logs.js";
import { generationView } from "./generation.js";
import { auditView } from "./audit.js";
import { cacheView } from "./cache.js";
import { playgroundView } from "./playground.js";

const nav = document.getElementById("nav");

function loginView(message = "") {
  leave();
  setSession("");
  nav.hidden = true;
  const key = el("input", { id: "key", type: "password", placeholder: "master or admin key", autocomplete: "off", "aria-label": "API key" });
  const error = el("p", { class: "error", id: "login-error", role: "alert", text: message });
  const form = el("form", { class: "login" }, el("h2", { text: "Log in" }), key, el("button", { type: "submit", id: "login", text: "Log in" }), error);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const r = await fetch("/ui/login", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ key: key.value }) });
    key.value = "";
    if (!r.ok) {
      error.textContent = (await r.json()).error.message;
      return;
    }
    await start(await r.json());
  });
  show(form);
  key.focus();
}

async function start(session) {
  setSession(session.csrf);
  forgetKeyNames();
  document.getElementById("who").textContent = session.name;
  nav.hidden = false;
  await route();
}

// the page for a hash; the nav link of its section says it is the current one
const PAGES = [
  [/^\/overview$/, "overview", (m, p) => overviewView(p)],
  [/^\/usage$/, "overview", (m, p) => overviewView(p)],
  [/^\/keys$/, "keys", () => keysView()],
  [/^\/keys\/([\w]+)$/, "keys", (m, p) => keyView(m[1], p)],
  [/^\/routes$/, "routes", () => routesView()],
  [/^\/log$/, "log", () => logView()],
  [/^\/logs$/, "logs", (m, p) => logsView(p)],
  [/^\/gen\/([0-9A-Za-z]+)$/, "logs", (m) => generationView(m[1])],
  [/^\/audit$/, "audit", (m, p) => auditView(p)],
  [/^\/cache$/, "cache", (m, p) => cacheView(p)],
  [/^\/playground$/, "playground", () => playgroundView()],
];

async function route() {
  leave();
  const [path, params] = here();
  for (const [pattern, section, view] of PAGES) {
    const m = path.match(pattern);
    if (!m) continue;
    for (const a of nav.querySelectorAll("a")) {
      if (a.dataset.section === section) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    main.dataset.page = section;
    return view(m, params);
  }
  show(el("h2", { text: "No such page" }), el("p", {}, el("a", { href: "#/overview", text: "Go to the overview" })));
}

onUnauthorized(() => loginView("The session ended: log in again."));
window.addEventListener("hashchange", () => hasSession() && route());
document.getElementById("logout").addEventListener("click", async () => {
  await api("/ui/logout", { method: "POST" });
  loginView("Logged out.");
});

const session = await fetch("/ui/session", { credentials: "same-origin" });
if (session.ok) await start(await session.json());
else loginView();
