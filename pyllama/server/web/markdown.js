// Escape-first Markdown renderer for chat messages (the subset a chat needs: paragraphs, emphasis,
// headings, lists, block quotes, rules, links, inline code, fenced code blocks, tables).
//
// Safety rule: every piece of the source reaches the output through escapeHtml() before any
// markup is built around it, so the result needs no sanitizer: HTML in the source shows as text,
// and the only attributes written are escaped link targets with an allowed scheme, escaped
// language names and fixed class names. Images are shown as links (nothing is fetched).
// Math ($...$, \(...\), $$...$$) is left as text, protected from emphasis.
import { highlight } from "./highlight.js";

const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
export function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ESC[c]);
}

// A link target is kept when it is relative (no scheme) or uses http, https or mailto. Browsers
// ignore ASCII tab/newline inside a scheme ("java\tscript:"), so any control or space character
// refuses the link outright; entities cannot smuggle a colon because "&" was escaped first.
export function safeUrl(url) {
  if (/[\u0000-\u0020\u007f]/.test(url)) return null;
  const scheme = /^([^:/?#]*):/.exec(url);
  if (!scheme) return url;
  return /^(https?|mailto)$/i.test(scheme[1]) ? url : null;
}

const FENCE = /^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$/;
const SETEXT = /^ {0,3}(=+|-+)[ \t]*$/;
const TABLE_SEP = /^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;

const blank = (line) => /^\s*$/.test(line);
const indentOf = (line) => /^ */.exec(line.replace(/\t/g, "    "))[0].length;

function isTableStart(lines, i) {
  return lines[i].includes("|") && i + 1 < lines.length && lines[i + 1].includes("-") &&
    TABLE_SEP.test(lines[i + 1]) && splitRow(lines[i]).length === splitRow(lines[i + 1]).length;
}

// A line that ends a paragraph (CommonMark lets only an ordered list starting at 1 interrupt one).
function startsBlock(lines, i) {
  const line = lines[i];
  if (FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line)) return true;
  const m = ITEM.exec(line);
  if (m && m[3] && (!/\d/.test(m[2]) || parseInt(m[2], 10) === 1)) return true;
  return isTableStart(lines, i);
}

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith("|")) s = s.slice(1);
  if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
  const cells = [];
  let cur = "";
  for (let k = 0; k < s.length; k++) {
    if (s[k] === "\\" && s[k + 1] === "|") { cur += "|"; k++; } else if (s[k] === "|") {
      cells.push(cur.trim()); cur = "";
    } else cur += s[k];
  }
  cells.push(cur.trim());
  return cells;
}

function codeBlock(code, lang, open) {
  const name = lang.replace(/[^\w+#.-]/g, "").slice(0, 32);
  const label = escapeHtml(name || "text");
  return `<div class="code-block${open ? " open" : ""}"><div class="code-head">` +
    `<span class="code-lang">${label}</span><button type="button" class="copy-code" ` +
    `aria-label="Copy code">Copy</button></div><pre><code class="hl${name ? " language-" +
    escapeHtml(name) : ""}">${highlight(code, name)}</code></pre></div>`;
}

function renderTable(lines) {
  const aligns = splitRow(lines[1]).map((c) => c.startsWith(":") && c.endsWith(":") ? "center"
    : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : "");
  const cell = (tag, text, k) => `<${tag}${aligns[k] ? ` class="align-${aligns[k]}"` : ""}>` +
    `${inline(text || "")}</${tag}>`;
  const head = splitRow(lines[0]).map((c, k) => cell("th", c, k)).join("");
  const rows = lines.slice(2).map((l) => {
    const cells = splitRow(l);
    return "<tr>" + aligns.map((_, k) => cell("td", cells[k], k)).join("") + "</tr>";
  }).join("");
  return `<div class="table-wrap"><table><thead><tr>${head}</tr></thead>` +
    `<tbody>${rows}</tbody></table></div>`;
}

// One list starting at lines[i]; returns [html, next index].
function renderList(lines, i) {
  const first = ITEM.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const base = first[1].length;
  const items = [];
  let loose = false;
  let sawBlank = false;
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length > base + 1 || /\d/.test(m[2]) !== ordered) break;
    const contentIndent = m[1].length + m[2].length + 1;
    const body = [m[3] || ""];
    if (sawBlank && items.length) loose = true;
    sawBlank = false;
    let fence = "";            // the marker of a code fence open inside this item
    i++;
    while (i < lines.length) {
      const line = lines[i];
      if (blank(line)) { body.push(""); if (!fence) sawBlank = true; i++; continue; }
      const ind = indentOf(line);
      const sub = !fence && ITEM.exec(line);
      if (fence || ind >= contentIndent || (sub && ind > base + 1)) {
        if (sawBlank && !sub) loose = true;
        const d = line.replace(/\t/g, "    ").slice(Math.min(ind, contentIndent));
        const f = /^ {0,3}(`{3,}|~{3,})[ \t]*(\S*)/.exec(d);
        if (f && !fence) fence = f[1];
        else if (f && f[1][0] === fence[0] && f[1].length >= fence.length && !f[2]) fence = "";
        body.push(d);
        sawBlank = false;
        i++;
        continue;
      }
      if (sawBlank || sub || startsBlock(lines, i)) break;
      body.push(line.trim());       // lazy continuation of the item's paragraph
      i++;
    }
    while (body.length > 1 && body[body.length - 1] === "") body.pop();
    let task = "";
    const t = /^\[([ xX])\][ \t]+/.exec(body[0]);
    if (t) {
      task = `<input type="checkbox" disabled${t[1] === " " ? "" : " checked"}> `;
      body[0] = body[0].slice(t[0].length);
    }
    items.push([task, body]);
  }
  const html = items.map(([task, body]) => {
    let inner = blocks(body);
    if (!loose) inner = inner.replace(/<p>([\s\S]*?)<\/p>/g, "$1");
    return `<li${task ? ' class="task"' : ""}>${task}${inner}</li>`;
  }).join("");
  const start = ordered ? parseInt(first[2], 10) : 1;
  const tag = ordered ? "ol" : "ul";
  return [`<${tag}${start !== 1 ? ` start="${start}"` : ""}>${html}</${tag}>`, i];
}

function blocks(lines) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (blank(line)) { i++; continue; }
    let m;
    if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const close = new RegExp(`^ {0,3}${fence[0] === "`" ? "`" : "~"}{${fence.length},}[ \\t]*$`);
      const indent = indentOf(line);
      const code = [];
      i++;
      while (i < lines.length && !close.test(lines[i])) {
        code.push(lines[i].slice(Math.min(indent, indentOf(lines[i]))));
        i++;
      }
      const open = i >= lines.length;      // unclosed fence: a code block to the end (streaming)
      out.push(codeBlock(code.join("\n"), m[2], open));
      i++;
      continue;
    }
    if ((m = HEADING.exec(line))) {
      const n = m[1].length;
      out.push(`<h${n}>${inline(m[2] || "")}</h${n}>`);
      i++;
      continue;
    }
    if (RULE.test(line)) { out.push("<hr>"); i++; continue; }
    if (QUOTE.test(line)) {
      const inner = [];
      while (i < lines.length && !blank(lines[i])) {
        inner.push(lines[i].replace(QUOTE, ""));
        i++;
      }
      out.push(`<blockquote>${blocks(inner)}</blockquote>`);
      continue;
    }
    if (ITEM.test(line) && ITEM.exec(line)[3] !== undefined) {
      const [html, next] = renderList(lines, i);
      out.push(html);
      i = next;
      continue;
    }
    if (isTableStart(lines, i)) {
      const rows = [lines[i], lines[i + 1]];
      i += 2;
      while (i < lines.length && !blank(lines[i]) && lines[i].includes("|")) rows.push(lines[i++]);
      out.push(renderTable(rows));
      continue;
    }
    const para = [line.trim()];
    i++;
    let heading = 0;
    while (i < lines.length && !blank(lines[i])) {
      if ((m = SETEXT.exec(lines[i]))) { heading = m[1][0] === "=" ? 1 : 2; i++; break; }
      if (startsBlock(lines, i)) break;
      para.push(lines[i].trim());
      i++;
    }
    const text = inline(para.join("\n"));
    out.push(heading ? `<h${heading}>${text}</h${heading}>` : `<p>${text}</p>`);
  }
  return out.join("");
}

// Inline markup. Code spans, math, backslash escapes and links become placeholders (\u0000n\u0000)
// holding finished HTML; the rest is escaped, then emphasis tags are added around escaped text.
const PUNCT = "!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~";
const PROTECT = new RegExp(
  "(`+)([\\s\\S]*?[^`])\\1(?!`)" +                  // code span
  "|(\\$\\$[\\s\\S]+?\\$\\$|\\\\\\([\\s\\S]+?\\\\\\)|\\\\\\[[\\s\\S]+?\\\\\\]" +
  "|\\$(?=[^\\s$])[^$\\n]*?[^\\s$\\\\]\\$(?!\\d)|\\$[^\\s$]\\$(?!\\d))" +   // math, left as text
  "|\\\\([" + PUNCT + "])",                         // backslash escape
  "g");
const LINK = /(!?)\[([^\]\n]*)\]\([ \t]*(&lt;[^\n]*?&gt;|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:[ \t]+(?:&quot;[^\n]*?&quot;|&#39;[^\n]*?&#39;))?[ \t]*\)/g;
const AUTOLINK = /&lt;((?:https?:\/\/|mailto:)(?:[^\s&\u0000]|&amp;)+?)&gt;|\b(https?:\/\/(?:[^\s&\u0000]|&amp;)+)/g;

function unescapeHtml(s) {
  return s.replace(/&(amp|lt|gt|quot|#39);/g, (_, e) =>
    ({ amp: "&", lt: "<", gt: ">", quot: '"', "#39": "'" })[e]);
}

export function inline(src) {
  const slots = [];
  const hold = (html) => `\u0000${slots.push(html) - 1}\u0000`;
  let s = String(src).replace(/\u0000/g, "\ufffd").replace(PROTECT, (all, ticks, code, math, esc) => {
    if (ticks !== undefined) {
      let c = code.replace(/\n/g, " ");
      if (/^ .*[^ ].* $/.test(c)) c = c.slice(1, -1);
      return hold(`<code>${escapeHtml(c)}</code>`);
    }
    if (esc !== undefined) return hold(escapeHtml(esc));
    return hold(`<span class="math">${escapeHtml(math)}</span>`);
  });
  s = escapeHtml(s);
  const link = (href, textHtml, cls) => {
    const url = safeUrl(unescapeHtml(href));
    if (url === null) return textHtml;
    return hold(`<a href="${escapeHtml(url)}"${cls ? ` class="${cls}"` : ""} target="_blank" ` +
      `rel="noopener noreferrer">${textHtml}</a>`);
  };
  s = s.replace(LINK, (all, bang, text, href) => {
    if (href.startsWith("&lt;")) href = href.slice(4, -4);
    const label = emphasis(text) || escapeHtml(unescapeHtml(href));
    return link(href, label, bang ? "image-link" : "");
  });
  s = s.replace(AUTOLINK, (all, angled, bare) => {
    let url = angled || bare;
    let tail = "";
    if (bare) {
      const t = /(?:[.,;:!?'"*_~]|&quot;|&#39;|\))+$/.exec(url);
      if (t) {
        // keep a closing parenthesis that has its opening one inside the URL
        let cut = t[0];
        while (cut.startsWith(")") && (url.slice(0, -cut.length).split("(").length >
          url.slice(0, -cut.length).split(")").length)) cut = cut.slice(1);
        if (cut) { tail = cut; url = url.slice(0, -cut.length); }
      }
    }
    return link(url, url, "") + tail;
  });
  s = emphasis(s).replace(/\n/g, "<br>");
  for (let k = 0; k < 8 && s.includes("\u0000"); k++) {
    s = s.replace(/\u0000(\d+)\u0000/g, (_, n) => slots[+n]);
  }
  return s;
}

// Emphasis on already-escaped text: only tags are added, the text between them is untouched.
function emphasis(s) {
  return s
    .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, "$1<strong>$2</strong>")
    .replace(/\*(?=[^\s*])([^*]*?[^\s*]|[^\s*])\*/g, "<em>$1</em>")
    .replace(/(^|[^\w])_(?=[^\s_])([^_]*?[^\s_]|[^\s_])_(?!\w)/g, "$1<em>$2</em>")
    .replace(/~~(?=\S)([\s\S]*?\S)~~/g, "<del>$1</del>");
}

export function renderMarkdown(src) {
  const text = String(src ?? "").replace(/\r\n?/g, "\n").replace(/\u0000/g, "\ufffd");
  return blocks(text.split("\n"));
}
