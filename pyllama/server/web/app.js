// The llama-server chat page: conversations (IndexedDB), streaming Markdown replies from
// /v1/chat/completions, settings (localStorage), server state from /props. Every URL is relative
// to the page, so the page works at / and under --api-prefix, and nothing is loaded from
// another host.
import { renderMarkdown, escapeHtml } from "./markdown.js";
import { highlight } from "./highlight.js";
import * as store from "./store.js";
import { events, errorText, applyChunk } from "./api.js";
import { FIELDS, byKey, serverDefaults, parseValue, formatValue, same } from "./settings.js";

const $ = (sel, root = document) => root.querySelector(sel);

// Icons: simple stroke paths drawn for this page (24x24 view box).
const PATHS = {
  plus: "M12 5v14M5 12h14",
  menu: "M4 7h16M4 12h16M4 17h16",
  gear: "M12 15a3 3 0 1 0 0-6 3 3 0 0 0 0 6zM19.4 13a7.5 7.5 0 0 0 0-2l2-1.6-2-3.4-2.4 1a7.5 7.5 0 0 0-1.7-1L15 3.5h-4l-.3 2.5a7.5 7.5 0 0 0-1.7 1l-2.4-1-2 3.4 2 1.6a7.5 7.5 0 0 0 0 2l-2 1.6 2 3.4 2.4-1a7.5 7.5 0 0 0 1.7 1l.3 2.5h4l.3-2.5a7.5 7.5 0 0 0 1.7-1l2.4 1 2-3.4z",
  copy: "M9 9h10v10H9zM5 15V5h10",
  edit: "M4 20h4L19 9l-4-4L4 16zM13.5 6.5l4 4",
  redo: "M20 11a8 8 0 1 0-2.3 5.7M20 4v7h-7",
  trash: "M4 7h16M9 7V4h6v3M6 7l1 13h10l1-13",
  clip: "M20 11.5l-8.2 8.2a5 5 0 0 1-7-7l8.5-8.5a3.3 3.3 0 0 1 4.7 4.7l-8.5 8.5a1.7 1.7 0 0 1-2.4-2.4L15 7",
  up: "M12 19V5M6 11l6-6 6 6",
  stop: "M7 7h10v10H7z",
  down: "M12 4v12M6 11l6 6 6-6M4 20h16",
  upload: "M12 16V4M6 9l6-6 6 6M4 20h16",
  check: "M5 12l5 5 9-10",
  x: "M6 6l12 12M18 6L6 18",
  prev: "M15 6l-6 6 6 6",
  next: "M9 6l6 6-6 6",
};
const icon = (name) => `<svg class="icon" viewBox="0 0 24 24" aria-hidden="true">` +
  `<path d="${PATHS[name]}"/></svg>`;

const state = {
  convs: [],            // every conversation, newest first
  current: null,        // the open conversation (null: a new, unsaved one)
  streaming: null,      // {conv, msg, ctl} while a reply is generated
  editing: null,        // id of the user message being edited
  attachments: [],      // [{name, content}] for the next message
  props: null,
  defaults: {},         // server sampling defaults and --ui-config values
  uiSettings: {},       // --ui-config values alone (/props ui_settings)
  overrides: store.loadSettings(),
  renameId: null,
  filter: "",
};

// ----------------------------------------------------------------------------- settings
function setting(key) {
  if (key in state.overrides) return state.overrides[key];
  if (key in state.defaults) return state.defaults[key];
  const f = byKey.get(key);
  return f ? f.def : undefined;
}

function applyTheme() {
  const t = setting("theme");
  if (t === "light" || t === "dark") document.documentElement.dataset.theme = t;
  else delete document.documentElement.dataset.theme;
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = setting("apiKey");
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

// ----------------------------------------------------------------------------- server state
let propsTimer = null;

function banner(text, kind = "info") {
  const b = $("#banner");
  if (!text) { b.hidden = true; b.textContent = ""; return; }
  b.hidden = false;
  b.className = "banner " + kind;
  b.textContent = text;
}

async function loadProps() {
  clearTimeout(propsTimer);
  let r;
  try {
    r = await fetch("props", { headers: headers() });
  } catch (e) {
    banner(`Cannot reach the server (${e.message}). Retrying…`, "error");
    propsTimer = setTimeout(loadProps, 3000);
    return;
  }
  if (r.status === 503) {
    banner(`The server is loading the model (${await errorText(r)}). The page will be ready ` +
      "as soon as it is.", "info");
    propsTimer = setTimeout(loadProps, 1000);
    return;
  }
  if (!r.ok) {
    const why = await errorText(r);
    banner(r.status === 401 ? `The server refused the request: ${why}. Set the API key in ` +
      "Settings." : `Could not read the server's properties (${r.status}): ${why}`, "error");
    return;
  }
  const props = await r.json();
  state.props = props;
  state.uiSettings = props.ui_settings || {};
  state.defaults = { ...serverDefaults(props), ...state.uiSettings };
  banner("");
  const gen = props.default_generation_settings || {};
  const name = props.model_alias || String(props.model_path || "").split(/[\\/]/).pop();
  $("#model").textContent = name || "model";
  $("#model").title = props.model_path || "";
  $("#ctx").textContent = gen.n_ctx ? `ctx ${gen.n_ctx.toLocaleString("en")}` : "";
  $("#ctx").title = `context size per slot; ${props.total_slots || 1} slot(s)`;
  $("#empty-model").textContent = name || "";
  applyTheme();
}

// ----------------------------------------------------------------------------- sidebar
function titleOf(text) {
  const line = (text || "").split("\n").map((l) => l.trim()).find(Boolean) || "New chat";
  return line.length > 60 ? line.slice(0, 57) + "…" : line;
}

function dayLabel(t) {
  const d = new Date(t);
  const today = new Date();
  if (d.toDateString() === today.toDateString()) {
    return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  }
  return d.toLocaleDateString([], { month: "short", day: "numeric" });
}

function renderSidebar() {
  const ul = $("#conv-list");
  ul.textContent = "";
  const f = state.filter.toLowerCase();
  const shown = state.convs.filter((c) => !f || c.name.toLowerCase().includes(f) ||
    c.messages.some((m) => (m.content || "").toLowerCase().includes(f)));
  for (const c of shown) {
    const li = document.createElement("li");
    li.className = "conv-item" + (state.current && state.current.id === c.id ? " active" : "");
    li.dataset.id = c.id;
    if (state.renameId === c.id) {
      li.innerHTML = `<input class="rename-input" aria-label="Conversation name">`;
      const input = li.firstChild;
      input.value = c.name;
      input.addEventListener("keydown", (e) => {
        if (e.key === "Enter") { e.preventDefault(); finishRename(c, input.value); }
        if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); finishRename(c, null); }
      });
      input.addEventListener("blur", () => finishRename(c, input.value));
      ul.appendChild(li);
      setTimeout(() => { input.focus(); input.select(); });
      continue;
    }
    li.innerHTML = `<button type="button" class="conv-open"><span class="conv-name"></span>` +
      `<span class="conv-date"></span></button>` +
      `<button type="button" class="icon-btn conv-rename" aria-label="Rename">${icon("edit")}` +
      `</button><button type="button" class="icon-btn conv-delete" aria-label="Delete">` +
      `${icon("trash")}</button>`;
    $(".conv-name", li).textContent = c.name;
    $(".conv-date", li).textContent = dayLabel(c.updated);
    $(".conv-open", li).title = c.name;
    if (state.current && state.current.id === c.id) $(".conv-open", li).setAttribute("aria-current", "true");
    ul.appendChild(li);
  }
  if (!shown.length) {
    ul.innerHTML = `<li class="conv-none">${state.convs.length ? "No match" : "No conversations yet"}</li>`;
  }
}

async function finishRename(conv, name) {
  if (state.renameId !== conv.id) return;
  state.renameId = null;
  if (name !== null && name.trim() && name.trim() !== conv.name) {
    conv.name = name.trim();
    await persist(conv, false);
  }
  renderSidebar();
}

async function refreshList() {
  state.convs = await store.listConversations();
  renderSidebar();
}

$("#conv-list").addEventListener("click", async (e) => {
  const li = e.target.closest(".conv-item");
  if (!li) return;
  const conv = state.convs.find((c) => c.id === li.dataset.id);
  if (!conv) return;
  if (e.target.closest(".conv-rename")) {
    state.renameId = conv.id;
    renderSidebar();
  } else if (e.target.closest(".conv-delete")) {
    if (!confirm(`Delete the conversation "${conv.name}"?`)) return;
    conv.deleted = true;              // an answer still streaming into it must not save it again
    if (state.streaming && state.streaming.conv.id === conv.id) {
      state.streaming.conv.deleted = true;
      state.streaming.ctl.abort();
    }
    await store.deleteConversation(conv.id);
    if (state.current && state.current.id === conv.id) openConversation(null);
    await refreshList();
  } else if (e.target.closest(".conv-open")) {
    openConversation(conv);
    closeSidebarOnMobile();
  }
});

$("#search").addEventListener("input", (e) => { state.filter = e.target.value; renderSidebar(); });

function openConversation(conv) {
  state.current = conv;
  state.editing = null;
  const hash = conv ? "#/c/" + conv.id : "";
  if (location.hash !== hash) history.replaceState(null, "", location.pathname + hash);
  renderSidebar();
  renderMessages(true);
  $("#input").focus();
}

async function persist(conv, touch = true) {
  if (conv.deleted) return;
  if (touch) conv.updated = Date.now();
  await store.saveConversation(conv);
  const i = state.convs.findIndex((c) => c.id === conv.id);
  if (i >= 0) state.convs[i] = conv; else state.convs.unshift(conv);
  state.convs.sort((a, b) => b.updated - a.updated);
  renderSidebar();
}

$("#new-chat").addEventListener("click", () => { openConversation(null); closeSidebarOnMobile(); });

$("#export").addEventListener("click", async () => {
  const all = await store.listConversations();
  const blob = new Blob([store.exportJson(all)], { type: "application/json" });
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = `conversations-${new Date().toISOString().slice(0, 10)}.json`;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
});

$("#import").addEventListener("click", () => $("#import-file").click());
$("#import-file").addEventListener("change", async (e) => {
  const file = e.target.files[0];
  e.target.value = "";
  if (!file) return;
  try {
    const convs = store.parseImport(await file.text());
    const known = new Set(state.convs.map((c) => c.id));
    for (const c of convs) {
      if (known.has(c.id)) c.id = store.newId();   // an import never overwrites a conversation
      await store.saveConversation(c);
    }
    await refreshList();
    if (convs.length) openConversation(state.convs.find((c) => c.id === convs[0].id));
    banner(`Imported ${convs.length} conversation(s).`, "info");
    setTimeout(() => banner(""), 3000);
  } catch (err) {
    banner(`Import failed: ${err.message}`, "error");
  }
});

function closeSidebarOnMobile() { document.body.classList.remove("sidebar-open"); }
$("#toggle-sidebar").addEventListener("click", () => {
  if (matchMedia("(max-width: 800px)").matches) document.body.classList.toggle("sidebar-open");
  else document.body.classList.toggle("sidebar-hidden");
});
$("#scrim").addEventListener("click", closeSidebarOnMobile);

// ----------------------------------------------------------------------------- messages
function statsText(msg) {
  const t = msg.timings;
  if (!t) return "";
  const parts = [];
  if (t.prompt_n !== undefined) {
    parts.push(`${t.prompt_n} prompt tokens` + (t.cache_n ? ` (${t.cache_n} cached)` : "") +
      (t.prompt_per_second ? ` at ${t.prompt_per_second.toFixed(1)} t/s` : ""));
  }
  if (t.predicted_n !== undefined) parts.push(`${t.predicted_n} generated`);
  if (t.predicted_per_second) parts.push(`${t.predicted_per_second.toFixed(1)} t/s`);
  const nctx = state.props && state.props.default_generation_settings &&
    state.props.default_generation_settings.n_ctx;
  if (nctx && t.prompt_n !== undefined) {
    parts.push(`context ${(t.cache_n || 0) + t.prompt_n + (t.predicted_n || 0)}/${nctx}`);
  }
  return parts.join(" · ");
}

function attachmentChips(list, removable) {
  return list.map((a, i) => `<span class="chip" title="${escapeHtml(a.name)}: ` +
    `${a.content.length.toLocaleString("en")} characters">${icon("clip")}` +
    `<span class="chip-name">${escapeHtml(a.name)}</span>` +
    (removable ? `<button type="button" class="chip-remove" data-i="${i}" ` +
      `aria-label="Remove ${escapeHtml(a.name)}">${icon("x")}</button>` : "") + "</span>").join("");
}

function toolCallsHtml(calls) {
  return calls.map((c) => {
    const fn = c.function || {};
    let args = fn.arguments || "";
    try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* partial or plain */ }
    return `<div class="tool-call"><div class="tool-head">Tool call <code>` +
      `${escapeHtml(fn.name || "?")}</code></div><pre><code class="hl">` +
      `${highlight(args, "json")}</code></pre></div>`;
  }).join("");
}

function versionsHtml(msg) {
  const b = msg.branch;
  if (!b || b.tails.length < 2) return "";
  const off = state.streaming ? " disabled" : "";
  return `<span class="versions"><button type="button" class="icon-btn ver-prev" ` +
    `aria-label="Previous version"${b.at === 0 ? " disabled" : off}>${icon("prev")}</button>` +
    `<span class="ver-label">${b.at + 1}/${b.tails.length}</span><button type="button" ` +
    `class="icon-btn ver-next" aria-label="Next version"` +
    `${b.at === b.tails.length - 1 ? " disabled" : off}>${icon("next")}</button></span>`;
}

function messageHtml(conv, msg, index) {
  const live = state.streaming && state.streaming.msg === msg;
  const last = index === conv.messages.length - 1;
  if (msg.role === "user") {
    if (state.editing === msg.id) {
      return `<div class="bubble editing"><textarea class="edit-box" aria-label="Edit message">` +
        `${escapeHtml(msg.content)}</textarea><div class="edit-actions">` +
        `<button type="button" class="btn edit-cancel">Cancel</button>` +
        `<button type="button" class="btn primary edit-send">Send</button></div></div>`;
    }
    return `<div class="bubble">${msg.attachments && msg.attachments.length
      ? `<div class="chips">${attachmentChips(msg.attachments, false)}</div>` : ""}` +
      `<div class="msg-content plain"></div></div><div class="msg-actions">${versionsHtml(msg)}` +
      `<button type="button" class="icon-btn copy-msg" aria-label="Copy message" title="Copy">` +
      `${icon("copy")}</button>` + (state.streaming ? "" : `<button type="button" ` +
      `class="icon-btn edit" aria-label="Edit message" title="Edit">${icon("edit")}</button>`) +
      `</div>`;
  }
  let html = "";
  if (msg.reasoning) {
    const thinking = live && !msg.content;
    html += `<details class="reasoning"><summary>${thinking ? '<span class="spinner"></span>' +
      "Thinking…" : "Reasoning"}</summary><div class="md reasoning-body">` +
      `${renderMarkdown(msg.reasoning)}</div></details>`;
  }
  if (msg.content) html += `<div class="msg-content md">${renderMarkdown(msg.content)}</div>`;
  if (msg.toolCalls && msg.toolCalls.length) html += toolCallsHtml(msg.toolCalls);
  if (live && !msg.content && !msg.reasoning) {
    html += `<div class="typing" aria-label="Waiting for the reply">` +
      (msg.progress ? `<span class="progress">Processing the prompt ${msg.progress}</span>`
        : "<span></span><span></span><span></span>") + "</div>";
  }
  if (msg.error) {
    html += `<div class="error-box" role="alert"><strong>Error</strong> ` +
      `<span class="error-text">${escapeHtml(msg.error)}</span></div>`;
  }
  const stats = setting("showMessageStats") ? statsText(msg) : "";
  html += `<div class="msg-actions">${versionsHtml(msg)}`;
  if (!live) {
    if (msg.content) {
      html += `<button type="button" class="icon-btn copy-msg" aria-label="Copy message" ` +
        `title="Copy">${icon("copy")}</button>`;
    }
    if (!state.streaming && last) {
      html += `<button type="button" class="icon-btn regenerate" aria-label="Regenerate" ` +
        `title="Regenerate">${icon("redo")}</button>`;
    }
  }
  if (msg.stopped) html += `<span class="note">stopped</span>`;
  if (stats) html += `<span class="msg-stats">${escapeHtml(stats)}</span>`;
  html += `</div>`;
  return html;
}

function messageElement(conv, msg, index) {
  const el = document.createElement("article");
  el.className = `msg ${msg.role}`;
  el.dataset.id = msg.id;
  el.setAttribute("aria-label", msg.role === "user" ? "Your message" : "Assistant message");
  fillMessage(el, conv, msg, index);
  return el;
}

function fillMessage(el, conv, msg, index) {
  const wasOpen = !!(el.querySelector("details.reasoning") || {}).open;
  el.classList.toggle("live", !!(state.streaming && state.streaming.msg === msg));
  el.innerHTML = messageHtml(conv, msg, index);
  const plain = $(".msg-content.plain", el);
  if (plain) plain.textContent = msg.content;
  const details = $("details.reasoning", el);
  if (details && wasOpen) details.open = true;
}

function nearBottom() {
  const box = $("#messages");
  return box.scrollHeight - box.scrollTop - box.clientHeight < 120;
}

function scrollToBottom() {
  const box = $("#messages");
  box.scrollTop = box.scrollHeight;
}

function renderMessages(scroll = false) {
  const log = $("#log");
  const conv = state.current;
  log.textContent = "";
  const empty = !conv || !conv.messages.length;
  $("#empty").hidden = !empty;
  if (!empty) {
    conv.messages.forEach((m, i) => {
      if (m.role === "user" || m.role === "assistant") log.appendChild(messageElement(conv, m, i));
    });
  }
  const edit = $(".edit-box", log);
  if (edit) { autosize(edit); edit.focus(); }
  if (scroll) scrollToBottom();
  updateComposer();
}

let frame = 0;
function renderLive() {
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    const s = state.streaming;
    if (!s || s.conv !== state.current) return;
    const el = $(`#log article[data-id="${s.msg.id}"]`);
    if (!el) return;
    const stick = nearBottom();
    fillMessage(el, s.conv, s.msg, s.conv.messages.indexOf(s.msg));
    if (stick) scrollToBottom();
  });
}

async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    // navigator.clipboard needs a secure context (http://localhost is one, a LAN address is not)
    const ta = document.createElement("textarea");
    ta.value = text;
    ta.style.position = "fixed";
    ta.style.opacity = "0";
    document.body.appendChild(ta);
    ta.select();
    document.execCommand("copy");
    ta.remove();
  }
  if (button) {
    button.classList.add("copied");
    const label = button.getAttribute("aria-label");
    if (button.classList.contains("copy-code")) button.textContent = "Copied";
    setTimeout(() => {
      button.classList.remove("copied");
      if (button.classList.contains("copy-code")) button.textContent = "Copy";
      button.setAttribute("aria-label", label);
    }, 1500);
  }
}

$("#log").addEventListener("click", (e) => {
  const conv = state.current;
  const art = e.target.closest("article.msg");
  const msg = art && conv && conv.messages.find((m) => m.id === art.dataset.id);
  const code = e.target.closest(".copy-code");
  if (code) {
    copyText($("pre", code.closest(".code-block")).textContent, code);
    return;
  }
  if (!msg) return;
  const btn = e.target.closest("button");
  if (!btn) return;
  if (btn.classList.contains("copy-msg")) copyText(msg.content, btn);
  else if (btn.classList.contains("edit")) { state.editing = msg.id; renderMessages(); }
  else if (btn.classList.contains("edit-cancel")) { state.editing = null; renderMessages(); }
  else if (btn.classList.contains("edit-send")) sendEdit(conv, msg, $(".edit-box", art).value);
  else if (btn.classList.contains("regenerate")) regenerate(conv, msg);
  else if (btn.classList.contains("ver-prev")) switchVersion(conv, msg, -1);
  else if (btn.classList.contains("ver-next")) switchVersion(conv, msg, +1);
});

$("#log").addEventListener("keydown", (e) => {
  if (!e.target.classList.contains("edit-box")) return;
  const art = e.target.closest("article.msg");
  const msg = state.current.messages.find((m) => m.id === art.dataset.id);
  if (e.key === "Escape") {
    e.preventDefault();
    e.stopPropagation();
    state.editing = null;
    renderMessages();
  } else if (e.key === "Enter" && !e.shiftKey && !e.isComposing && setting("sendOnEnter")) {
    e.preventDefault();
    sendEdit(state.current, msg, e.target.value);
  }
});
$("#log").addEventListener("input", (e) => {
  if (e.target.classList.contains("edit-box")) autosize(e.target);
});

// ----------------------------------------------------------------------------- generation
function contentWithAttachments(m) {
  let text = m.content || "";
  for (const a of m.attachments || []) {
    text += `\n\n--- File: ${a.name} ---\n${a.content}\n--- End of ${a.name} ---`;
  }
  return text;
}

function requestBody(conv, msg) {
  const messages = [];
  const sys = setting("systemMessage");
  if (sys && sys.trim()) messages.push({ role: "system", content: sys });
  for (const m of conv.messages) {
    if (m === msg) break;
    if (m.role === "user") messages.push({ role: "user", content: contentWithAttachments(m) });
    else if (m.role === "assistant" && m.content) messages.push({ role: "assistant", content: m.content });
    else if (m.role === "system") messages.push({ role: "system", content: m.content });
  }
  const body = { messages, stream: true, cache_prompt: true, timings_per_token: true,
    return_progress: true };
  for (const f of FIELDS) {
    // the server applies its own defaults; a value from --ui-config or the settings is sent
    if (f.server && (f.key in state.overrides || f.key in state.uiSettings)) body[f.key] = setting(f.key);
  }
  const custom = setting("customJson");
  if (custom && custom.trim()) Object.assign(body, JSON.parse(custom));
  return body;
}

function describeError(e, status) {
  if (status === 503) return `The server is still loading the model; try again in a moment. ` +
    `(server: ${e})`;
  if (status) return `${status}: ${e}`;
  return String(e);
}

async function generate(conv, branch = null) {
  const msg = { id: store.newId(), role: "assistant", content: "", created: Date.now() };
  if (branch) msg.branch = branch;
  if (state.props) msg.model = state.props.model_alias;
  conv.messages.push(msg);
  const ctl = new AbortController();
  state.streaming = { conv, msg, ctl };
  renderMessages(true);
  let lastSave = Date.now();
  try {
    let body;
    try {
      body = JSON.stringify(requestBody(conv, msg));
    } catch (e) {
      throw new Error(`the custom JSON in Settings is not valid: ${e.message}`);
    }
    let r;
    try {
      r = await fetch("v1/chat/completions", { method: "POST", headers: headers(), body,
        signal: ctl.signal });
    } catch (e) {
      if (e.name === "AbortError") throw e;
      throw new Error(`cannot reach the server (${e.message}); is llama-server running?`);
    }
    if (!r.ok) throw new Error(describeError(await errorText(r), r.status));
    for await (const ev of events(r)) {
      applyChunk(msg, ev);
      renderLive();
      if (Date.now() - lastSave > 1000) { lastSave = Date.now(); persist(conv); }
    }
  } catch (e) {
    if (e.name === "AbortError") msg.stopped = true;
    else msg.error = e.message || String(e);
  } finally {
    delete msg.progress;
    state.streaming = null;
    if (!msg.content && !msg.reasoning && !(msg.toolCalls && msg.toolCalls.length) && !msg.error) {
      dropFrom(conv, msg);
    }
    await persist(conv);
    if (conv === state.current) renderMessages(nearBottom());
    updateComposer();
  }
}

function dropFailed(conv) {
  for (let m; (m = conv.messages[conv.messages.length - 1]) && m.role === "assistant" &&
    m.error && !m.content;) dropFrom(conv, m);
}

async function send(text) {
  if (state.streaming) return;
  const attachments = state.attachments;
  if (!text.trim() && !attachments.length) return;
  let conv = state.current;
  if (!conv) {
    const now = Date.now();
    conv = { id: store.newId(), name: titleOf(text || attachments[0].name), created: now,
      updated: now, messages: [] };
    state.current = conv;
    history.replaceState(null, "", "#/c/" + conv.id);
  }
  dropFailed(conv);
  conv.messages.push({ id: store.newId(), role: "user", content: text, created: Date.now(),
    ...(attachments.length ? { attachments } : {}) });
  state.attachments = [];
  renderAttachments();
  await persist(conv);
  await generate(conv);
}

// Versions: editing or regenerating the message at position i keeps the old path from i on (that
// message and all after it) as another version of position i. conv.messages is the active path;
// its message at i holds branch = {tails, at}: every version's path, its own (tails[at]) null.
function forkAt(conv, i) {
  const old = conv.messages[i];
  const branch = old.branch || { tails: [null], at: 0 };
  delete old.branch;
  branch.tails[branch.at] = conv.messages.slice(i);
  conv.messages.splice(i);
  branch.tails.push(null);
  branch.at = branch.tails.length - 1;
  return branch;
}

function activate(conv, i, branch, j) {
  const tail = branch.tails[j];
  branch.tails[j] = null;
  branch.at = j;
  conv.messages.splice(i, Infinity, ...tail);
  if (branch.tails.length > 1) tail[0].branch = branch;
}

function switchVersion(conv, msg, step) {
  const i = conv.messages.indexOf(msg);
  const b = msg.branch;
  if (state.streaming || !b || !b.tails[b.at + step]) return;
  delete msg.branch;
  b.tails[b.at] = conv.messages.slice(i);
  activate(conv, i, b, b.at + step);
  persist(conv, false);
  renderMessages();
}

// Remove the active path from msg on (a failed or empty answer); an older version, if any,
// becomes the active one again.
function dropFrom(conv, msg) {
  const i = conv.messages.indexOf(msg);
  const b = msg.branch;
  conv.messages.splice(i);
  if (b) {
    b.tails.splice(b.at, 1);
    activate(conv, i, b, b.tails.length - 1);
  }
}

async function sendEdit(conv, msg, text) {
  if (state.streaming || !text.trim()) return;
  const branch = forkAt(conv, conv.messages.indexOf(msg));
  conv.messages.push({ ...msg, id: store.newId(), content: text, created: Date.now(), branch });
  state.editing = null;
  await persist(conv);
  await generate(conv);
}

async function regenerate(conv, msg) {
  if (state.streaming) return;
  await generate(conv, forkAt(conv, conv.messages.indexOf(msg)));
}

function stop() {
  if (state.streaming) state.streaming.ctl.abort();
}

// ----------------------------------------------------------------------------- composer
function autosize(ta) {
  ta.style.height = "auto";
  ta.style.height = Math.min(ta.scrollHeight, window.innerHeight * 0.4) + "px";
}

function updateComposer() {
  const btn = $("#send");
  const busy = !!state.streaming;
  btn.classList.toggle("stop", busy);
  btn.innerHTML = icon(busy ? "stop" : "up") + `<span>${busy ? "Stop" : "Send"}</span>`;
  btn.setAttribute("aria-label", busy ? "Stop generating" : "Send message");
  btn.title = busy ? "Stop (Esc)" : "Send (Enter)";
}

function renderAttachments() {
  const box = $("#attachments");
  box.innerHTML = attachmentChips(state.attachments, true);
  box.hidden = !state.attachments.length;
}

$("#attachments").addEventListener("click", (e) => {
  const b = e.target.closest(".chip-remove");
  if (!b) return;
  state.attachments.splice(+b.dataset.i, 1);
  renderAttachments();
});

function looksBinary(text) {
  const head = text.slice(0, 8192);
  return head.includes("\u0000") || (head.match(/\ufffd/g) || []).length > head.length / 20;
}

async function addFiles(files) {
  const refused = [];
  for (const f of files) {
    if (f.size > 4 * 1024 * 1024) { refused.push(`${f.name} (over 4 MB)`); continue; }
    const text = await f.text();
    if (looksBinary(text)) { refused.push(`${f.name} (not a text file)`); continue; }
    state.attachments.push({ name: f.name, content: text });
  }
  renderAttachments();
  if (refused.length) {
    banner(`Only text files can be attached; skipped: ${refused.join(", ")}.`, "error");
    setTimeout(() => banner(""), 6000);
  }
}

$("#attach").addEventListener("click", () => $("#attach-file").click());
$("#attach-file").addEventListener("change", (e) => {
  addFiles([...e.target.files]);
  e.target.value = "";
});

const input = $("#input");
input.addEventListener("input", () => autosize(input));
input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing && setting("sendOnEnter")) {
    e.preventDefault();
    $("#composer").requestSubmit();
  }
});
input.addEventListener("paste", (e) => {
  const files = [...(e.clipboardData && e.clipboardData.files || [])];
  if (files.length) { e.preventDefault(); addFiles(files); return; }
  const text = e.clipboardData ? e.clipboardData.getData("text/plain") : "";
  const limit = Number(setting("pasteLongTextToFileLen")) || 0;
  if (limit > 0 && text.length > limit) {
    e.preventDefault();
    const n = state.attachments.filter((a) => a.name.startsWith("pasted-text")).length + 1;
    state.attachments.push({ name: `pasted-text-${n}.txt`, content: text });
    renderAttachments();
  }
});

const composer = $("#composer");
composer.addEventListener("submit", (e) => {
  e.preventDefault();
  if (state.streaming) { stop(); return; }
  const text = input.value;
  if (!text.trim() && !state.attachments.length) return;
  input.value = "";
  autosize(input);
  send(text);
});
composer.addEventListener("dragover", (e) => { e.preventDefault(); composer.classList.add("drop"); });
composer.addEventListener("dragleave", () => composer.classList.remove("drop"));
composer.addEventListener("drop", (e) => {
  e.preventDefault();
  composer.classList.remove("drop");
  addFiles([...e.dataTransfer.files]);
});

document.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && state.streaming && !$("#settings").open) { e.preventDefault(); stop(); }
  if ((e.ctrlKey || e.metaKey) && e.shiftKey && e.key.toLowerCase() === "o") {
    e.preventDefault();
    openConversation(null);
  }
  if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === "k") {
    e.preventDefault();
    document.body.classList.remove("sidebar-hidden");
    $("#search").focus();
  }
});

// ----------------------------------------------------------------------------- settings dialog
function fieldId(key) { return "set-" + key; }

function buildSettings() {
  const form = $("#settings-fields");
  let html = "";
  let open = false;
  for (const f of FIELDS) {
    if (f.section) {
      if (open) html += "</fieldset>";
      html += `<fieldset><legend>${escapeHtml(f.section)}</legend>`;
      open = true;
      continue;
    }
    const id = fieldId(f.key);
    const help = f.help ? `<small>${escapeHtml(f.help)}</small>` : "";
    const label = `<label for="${id}">${escapeHtml(f.label)}</label>`;
    let control;
    if (f.type === "bool") {
      html += `<div class="field check"><input type="checkbox" id="${id}">${label}${help}</div>`;
      continue;
    } else if (f.type === "select") {
      control = `<select id="${id}">` + f.options.map(([v, l]) =>
        `<option value="${v}">${escapeHtml(l)}</option>`).join("") + "</select>";
    } else if (f.type === "textarea") {
      control = `<textarea id="${id}" rows="3"></textarea>`;
    } else {
      const type = f.type === "password" ? "password" : f.type === "int" || f.type === "float"
        ? "number" : "text";
      const step = f.type === "float" ? ` step="${f.step || 0.1}"` : f.type === "int"
        ? ' step="1"' : "";
      control = `<input id="${id}" type="${type}"${step} autocomplete="off">`;
    }
    const wide = f.type === "textarea" || f.type === "list";
    html += `<div class="field${wide ? " wide" : ""}">${label}${control}${help}</div>`;
  }
  html += "</fieldset>";
  form.innerHTML = html;
}

function fillSettings(values) {
  for (const f of FIELDS) {
    if (!f.key) continue;
    const el = document.getElementById(fieldId(f.key));
    const v = values(f.key);
    if (f.type === "bool") el.checked = !!v; else el.value = formatValue(f, v);
    const def = f.key in state.defaults ? state.defaults[f.key] : f.def;
    if (f.server) el.placeholder = def === undefined ? "server default" : formatValue(f, def);
  }
  const p = state.props;
  $("#server-info").textContent = p ? [
    `model ${p.model_path || "?"}`,
    `context ${(p.default_generation_settings || {}).n_ctx || "?"} tokens per slot`,
    `${p.total_slots || "?"} slot(s)`,
    p.build_info ? `build ${p.build_info}` : "",
  ].filter(Boolean).join(" · ") : "server properties not loaded";
}

$("#open-settings").addEventListener("click", () => {
  fillSettings(setting);
  $("#settings-error").textContent = "";
  $("#settings").showModal();
});
$("#settings-cancel").addEventListener("click", () => $("#settings").close());
$("#settings-reset").addEventListener("click", () => {
  fillSettings((key) => (key in state.defaults ? state.defaults[key] : byKey.get(key).def));
});
$("#settings-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const next = {};
  try {
    for (const f of FIELDS) {
      if (!f.key) continue;
      const el = document.getElementById(fieldId(f.key));
      const v = parseValue(f, f.type === "bool" ? el.checked : el.value);
      const def = f.key in state.defaults ? state.defaults[f.key] : f.def;
      if (v !== undefined && !same(v, def)) next[f.key] = v;
    }
    if (next.customJson) JSON.parse(next.customJson);
  } catch (err) {
    $("#settings-error").textContent = err instanceof SyntaxError
      ? `Custom JSON: ${err.message}` : err.message;
    return;
  }
  state.overrides = next;
  store.storeSettings(next);
  applyTheme();
  $("#settings").close();
  renderMessages();
  if (!state.props) loadProps();            // e.g. an API key was just entered
});

// ----------------------------------------------------------------------------- start
async function start() {
  applyTheme();
  buildSettings();
  updateComposer();
  renderAttachments();
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", applyTheme);
  loadProps();
  try {
    await refreshList();
  } catch (e) {
    banner(`This browser does not keep conversations (IndexedDB: ${e.message}).`, "error");
  }
  const m = /^#\/c\/(.+)$/.exec(location.hash);
  const conv = m && state.convs.find((c) => c.id === decodeURIComponent(m[1]));
  openConversation(conv || null);
  document.body.classList.add("ready");
}

window.addEventListener("hashchange", () => {
  const m = /^#\/c\/(.+)$/.exec(location.hash);
  const conv = m && state.convs.find((c) => c.id === decodeURIComponent(m[1]));
  if ((conv || null) !== state.current) openConversation(conv || null);
});

start();
