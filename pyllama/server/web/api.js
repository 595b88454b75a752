// Reading llama-server's answers: server-sent events and error bodies.

// The parsed JSON of each `data:` line of a streamed response, until `data: [DONE]`.
export async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf = (buf + decoder.decode(value, { stream: true })).replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of ev.split("\n")) {
        const m = /^(data|error):\s?(.*)$/.exec(line);
        if (!m) continue;
        if (m[2] === "[DONE]") return;
        const obj = JSON.parse(m[2]);
        yield m[1] === "error" && !obj.error ? { error: obj } : obj;
      }
    }
  }
}

// The server's error text: the `error.message` of llama.cpp's JSON error shape, else the body.
export async function errorText(r) {
  const body = await r.text();
  try {
    const j = JSON.parse(body);
    if (j && j.error) return j.error.message || JSON.stringify(j.error);
  } catch { /* not JSON */ }
  return body.trim() || r.statusText;
}

// Fold one chunk of a streamed /v1/chat/completions answer into the message being built:
// content and reasoning_content deltas are appended, tool_calls deltas merged by their index
// (the first delta of a call has its id and name, later ones carry pieces of the arguments),
// timings and prompt progress kept. A chunk carrying an error throws its message.
export function applyChunk(msg, ev) {
  if (ev.error) throw new Error(ev.error.message || JSON.stringify(ev.error));
  for (const c of ev.choices || []) {
    const d = c.delta || {};
    if (typeof d.content === "string") msg.content = (msg.content || "") + d.content;
    if (typeof d.reasoning_content === "string") {
      msg.reasoning = (msg.reasoning || "") + d.reasoning_content;
    }
    if (Array.isArray(d.tool_calls)) mergeToolCalls(msg, d.tool_calls);
    if (c.finish_reason) msg.finish = c.finish_reason;
  }
  if (ev.prompt_progress) {
    const p = ev.prompt_progress;
    const todo = p.total - p.cache;
    msg.progress = todo > 0 ? `${Math.round(100 * (p.processed - p.cache) / todo)}%` : "";
  }
  if (ev.timings) msg.timings = ev.timings;
  return msg;
}

function mergeToolCalls(msg, deltas) {
  msg.toolCalls = msg.toolCalls || [];
  for (const d of deltas) {
    const i = Number.isInteger(d.index) ? d.index : msg.toolCalls.length;
    const cur = msg.toolCalls[i] || (msg.toolCalls[i] = { id: "", type: "function",
      function: { name: "", arguments: "" } });
    if (d.id) cur.id = d.id;
    if (d.function) {
      if (d.function.name) cur.function.name += d.function.name;
      if (d.function.arguments) cur.function.arguments += d.function.arguments;
    }
  }
}
