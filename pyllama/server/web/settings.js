// The settings the dialog edits. Sampling fields are named as the request fields of
// /v1/chat/completions; their defaults are the server's (/props default_generation_settings),
// so only the values a user changed are stored (per browser) and sent. UI fields may get
// defaults from the server's --ui-config (/props ui_settings).

export const FIELDS = [
  { section: "General" },
  { key: "systemMessage", label: "System message", type: "textarea", def: "",
    help: "Sent as the first message of every request." },
  { key: "theme", label: "Theme", type: "select", def: "system",
    options: [["system", "Follow the system"], ["light", "Light"], ["dark", "Dark"]] },
  { key: "apiKey", label: "API key", type: "password", def: "",
    help: "For a server started with --api-key." },
  { key: "pasteLongTextToFileLen", label: "Paste long text as a file above (characters)",
    type: "int", def: 2500, help: "0 pastes everything into the message box." },
  { key: "showMessageStats", label: "Show message statistics", type: "bool", def: true },
  { key: "sendOnEnter", label: "Send on Enter (Shift+Enter: new line)", type: "bool", def: true },

  { section: "Sampling" },
  { key: "temperature", label: "Temperature", type: "float", server: true, step: 0.05 },
  { key: "dynatemp_range", label: "Dynamic temperature range", type: "float", server: true },
  { key: "dynatemp_exponent", label: "Dynamic temperature exponent", type: "float",
    server: true },
  { key: "top_k", label: "Top K", type: "int", server: true },
  { key: "top_p", label: "Top P", type: "float", server: true, step: 0.01 },
  { key: "min_p", label: "Min P", type: "float", server: true, step: 0.01 },
  { key: "typical_p", label: "Typical P", type: "float", server: true, step: 0.01 },
  { key: "xtc_probability", label: "XTC probability", type: "float", server: true, step: 0.01 },
  { key: "xtc_threshold", label: "XTC threshold", type: "float", server: true, step: 0.01 },
  { key: "samplers", label: "Samplers (order, separated by ;)", type: "list", server: true },

  { section: "Penalties" },
  { key: "repeat_last_n", label: "Repeat last N", type: "int", server: true },
  { key: "repeat_penalty", label: "Repeat penalty", type: "float", server: true, step: 0.01 },
  { key: "presence_penalty", label: "Presence penalty", type: "float", server: true, step: 0.01 },
  { key: "frequency_penalty", label: "Frequency penalty", type: "float", server: true,
    step: 0.01 },
  { key: "dry_multiplier", label: "DRY multiplier", type: "float", server: true, step: 0.01 },
  { key: "dry_base", label: "DRY base", type: "float", server: true, step: 0.01 },
  { key: "dry_allowed_length", label: "DRY allowed length", type: "int", server: true },
  { key: "dry_penalty_last_n", label: "DRY penalty last N", type: "int", server: true },

  { section: "Output" },
  { key: "max_tokens", label: "Max tokens (-1: until the end of the context)", type: "int",
    server: true },
  { key: "seed", label: "Seed (-1: random)", type: "int", server: true },
  { key: "customJson", label: "Custom JSON merged into each request", type: "textarea", def: "",
    help: 'For example {"n_probs": 3}.' },
];

export const byKey = new Map(FIELDS.filter((f) => f.key).map((f) => [f.key, f]));

// The server's value of each sampling field, from /props.
export function serverDefaults(props) {
  const p = (props && props.default_generation_settings && props.default_generation_settings.params)
    || {};
  const out = {};
  for (const f of FIELDS) {
    if (!f.server) continue;
    let v = p[f.key];
    if (f.key === "max_tokens" && v === undefined) v = p.n_predict;
    if (f.key === "seed" && (v === undefined || v === 0xFFFFFFFF)) v = -1;
    if (v !== undefined && v !== null) out[f.key] = v;
  }
  return out;
}

export function parseValue(f, raw) {
  if (f.type === "bool") return !!raw;
  if (f.type === "int" || f.type === "float") {
    const s = String(raw).trim();
    if (s === "") return undefined;
    const n = Number(s);
    if (!Number.isFinite(n) || (f.type === "int" && !Number.isInteger(n))) {
      throw new Error(`${f.label}: "${s}" is not ${f.type === "int" ? "an integer" : "a number"}`);
    }
    return n;
  }
  if (f.type === "list") {
    const s = String(raw).trim();
    return s === "" ? undefined : s.split(/[;,\s]+/).filter(Boolean);
  }
  return String(raw);
}

export function formatValue(f, v) {
  if (v === undefined || v === null) return "";
  if (f.type === "list") return Array.isArray(v) ? v.join(";") : String(v);
  return String(v);
}

export const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
