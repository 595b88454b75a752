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
