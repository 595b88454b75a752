// Conversations in the browser's IndexedDB (one object store, one record per conversation) and
// the settings in localStorage. A conversation is
//   {id, name, created, updated, messages: [{id, role, content, ...}]}.

const DB_NAME = "pyllama-webui";
const STORE = "conversations";
const SETTINGS_KEY = "pyllama-webui.settings";
let opening = null;

function open() {
  if (!opening) {
    opening = new Promise((resolve, reject) => {
      const req = indexedDB.open(DB_NAME, 1);
      req.onupgradeneeded = () => req.result.createObjectStore(STORE, { keyPath: "id" });
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error);
    });
  }
  return opening;
}

async function run(mode, fn) {
  const db = await open();
  return new Promise((resolve, reject) => {
    const tx = db.transaction(STORE, mode);
    const req = fn(tx.objectStore(STORE));
    tx.oncomplete = () => resolve(req ? req.result : undefined);
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}

export async function listConversations() {
  const all = await run("readonly", (s) => s.getAll());
  return all.sort((a, b) => b.updated - a.updated);
}

// Structured clone refuses functions and DOM objects; a conversation is plain data, so a JSON
// round trip both checks that and drops transient fields set to undefined.
export const saveConversation = (c) =>
  run("readwrite", (s) => s.put(JSON.parse(JSON.stringify(c))));
export const deleteConversation = (id) => run("readwrite", (s) => s.delete(id));

export function newId() {
  if (globalThis.crypto && crypto.randomUUID) return crypto.randomUUID();   // secure contexts
  return Date.now().toString(36) + "-" + Math.random().toString(36).slice(2, 12);
}

// Import accepts what export writes ({conversations: [...]}), a bare array, or one conversation.
export function parseImport(text) {
  const data = JSON.parse(text);
  const list = Array.isArray(data) ? data : Array.isArray(data.conversations)
    ? data.conversations : [data];
  const out = [];
  for (const c of list) {
    if (!c || typeof c !== "object" || !Array.isArray(c.messages)) {
      throw new Error("not a conversation export (expected objects with a 'messages' array)");
    }
    const messages = c.messages.filter((m) => m && typeof m.role === "string").map((m) => ({
      ...m, id: typeof m.id === "string" ? m.id : newId(),
      content: typeof m.content === "string" ? m.content : String(m.content ?? ""),
    }));
    const now = Date.now();
    out.push({
      ...c, id: typeof c.id === "string" && c.id ? c.id : newId(),
      name: typeof c.name === "string" && c.name ? c.name : "Imported conversation",
      created: Number(c.created) || now, updated: Number(c.updated) || now, messages,
    });
  }
  return out;
}

export function exportJson(convs) {
  return JSON.stringify({ format: "pyllama-webui", version: 1, exported: Date.now(),
    conversations: convs }, null, 2);
}

export function loadSettings() {
  try {
    const v = JSON.parse(localStorage.getItem(SETTINGS_KEY) || "{}");
    return v && typeof v === "object" ? v : {};
  } catch {
    return {};
  }
}

export function storeSettings(overrides) {
  localStorage.setItem(SETTINGS_KEY, JSON.stringify(overrides));
}
