// Keyword highlighting for code blocks: one scanner per language (comments, strings, numbers,
// keywords, literals, types, function calls). Every token is escaped before it is wrapped in a
// <span class="tok-..."> (the class names are fixed), so the output is safe HTML.

const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const esc = (s) => s.replace(/[&<>"']/g, (c) => ESC[c]);
const words = (s) => new Set(s.split(/\s+/).filter(Boolean));

const C_COMMENT = ["//[^\\n]*", "/\\*[\\s\\S]*?(?:\\*/|$)"];
const HASH_COMMENT = ["#[^\\n]*"];
const DQ = '"(?:[^"\\\\\\n]|\\\\.)*"?';
const SQ = "'(?:[^'\\\\\\n]|\\\\.)*'?";
const BT = "`(?:[^`\\\\]|\\\\[\\s\\S])*`?";
const NUMBER = "\\b(?:0[xX][\\da-fA-F_]+|0[bB][01_]+|\\d[\\d_]*(?:\\.\\d[\\d_]*)?(?:[eE][+-]?\\d+)?)" +
  "[a-zA-Z]*\\b|\\.\\d+\\b";

const C_TYPES = "void char short int long float double signed unsigned bool size_t int8_t " +
  "int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t auto wchar_t";
const LANGS = {
  javascript: {
    comments: C_COMMENT, strings: [BT, DQ, SQ],
    keywords: "async await break case catch class const continue debugger default delete do " +
      "else export extends finally for from function if import in instanceof let new of " +
      "return static super switch this throw try typeof var void while with yield as " +
      "interface type enum implements private public protected readonly declare namespace",
    literals: "true false null undefined NaN Infinity",
    types: "string number boolean any unknown never object Array Promise Map Set",
  },
  python: {
    comments: HASH_COMMENT,
    strings: ['[rRbBuUfF]{0,2}"""[\\s\\S]*?(?:"""|$)', "[rRbBuUfF]{0,2}'''[\\s\\S]*?(?:'''|$)",
      "[rRbBuUfF]{0,2}" + DQ, "[rRbBuUfF]{0,2}" + SQ],
    keywords: "and as assert async await break class continue def del elif else except " +
      "finally for from global if import in is lambda nonlocal not or pass raise return try " +
      "while with yield match case",
    literals: "True False None self cls",
    types: "int float str bool list dict set tuple bytes object type print len range open " +
      "super isinstance enumerate zip map filter sorted min max sum abs",
    extra: [["meta", "@[\\w.]+"]],
  },
  c: {
    comments: C_COMMENT, strings: [DQ, SQ],
    keywords: "break case const continue default do else enum extern for goto if inline " +
      "register restrict return sizeof static struct switch typedef union volatile while " +
      "class namespace template typename public private protected virtual override new " +
      "delete this throw try catch using operator friend constexpr nullptr noexcept " +
      "static_cast dynamic_cast reinterpret_cast const_cast explicit mutable",
    literals: "true false NULL nullptr",
    types: C_TYPES + " std string vector map",
    extra: [["meta", "^[ \\t]*#[ \\t]*\\w+[^\\n]*"]],
  },
  java: {
    comments: C_COMMENT, strings: ['"""[\\s\\S]*?(?:"""|$)', DQ, SQ],
    keywords: "abstract assert break case catch class const continue default do else enum " +
      "extends final finally for goto if implements import instanceof interface native new " +
      "package private protected public return static strictfp super switch synchronized " +
      "this throw throws transient try volatile while var record fun val when object " +
      "override open data companion init is in",
    literals: "true false null",
    types: "void boolean byte char short int long float double String Integer Object List " +
      "Map Unit Int Long Double Boolean Any",
    extra: [["meta", "@\\w+"]],
  },
  csharp: {
    comments: C_COMMENT, strings: ['@"(?:[^"]|"")*"?', '\\$"(?:[^"\\\\\\n]|\\\\.)*"?', DQ, SQ],
    keywords: "abstract as async await base break case catch checked class const continue " +
      "default delegate do else enum event explicit extern finally fixed for foreach goto if " +
      "implicit in interface internal is lock namespace new operator out override params " +
      "private protected public readonly ref return sealed sizeof static struct switch this " +
      "throw try typeof unchecked unsafe using var virtual volatile while yield record get set",
    literals: "true false null",
    types: "void bool byte char decimal double float int long object sbyte short string " +
      "uint ulong ushort Task List Dictionary",
  },
  go: {
    comments: C_COMMENT, strings: ["`[^`]*`?", DQ, SQ],
    keywords: "break case chan const continue default defer else fallthrough for func go " +
      "goto if import interface map package range return select struct switch type var",
    literals: "true false nil iota",
    types: "bool byte complex64 complex128 error float32 float64 int int8 int16 int32 int64 " +
      "rune string uint uint8 uint16 uint32 uint64 uintptr any make new len cap append " +
      "panic recover",
  },
  rust: {
    comments: C_COMMENT, strings: ['b?r#*"[\\s\\S]*?(?:"#*|$)', DQ, "'(?:[^'\\\\\\n]|\\\\.)'"],
    keywords: "as async await break const continue crate dyn else enum extern fn for if impl " +
      "in let loop match mod move mut pub ref return self Self static struct super trait " +
      "type unsafe use where while",
    literals: "true false None Some Ok Err",
    types: "i8 i16 i32 i64 i128 isize u8 u16 u32 u64 u128 usize f32 f64 bool char str " +
      "String Vec Option Result Box Rc Arc HashMap",
    extra: [["meta", "#!?\\[[^\\]\\n]*\\]"], ["meta", "\\b\\w+!"]],
  },
  bash: {
    comments: HASH_COMMENT, strings: [DQ, "'[^']*'?"],
    keywords: "if then else elif fi for while until do done case esac in function return " +
      "local export readonly declare unset shift exit break continue source alias sudo",
    literals: "true false",
    types: "echo printf cd ls cat grep sed awk find mkdir rm cp mv chmod chown curl wget " +
      "git pip python python3 make apt apt-get npm tar ssh test read",
    extra: [["var", "\\$(?:\\{[^}\\n]*\\}|\\w+|[@#?$!*-])"]],
  },
  sql: {
    comments: ["--[^\\n]*", "/\\*[\\s\\S]*?(?:\\*/|$)"], strings: [SQ, DQ], nocase: true,
    keywords: "select from where and or not insert into values update set delete create " +
      "table drop alter add index primary key foreign references join left right inner " +
      "outer full on group by order having limit offset as distinct union all exists in " +
      "between like is case when then else end default unique constraint view with returning",
    literals: "null true false",
    types: "int integer bigint smallint text varchar char boolean date timestamp float real " +
      "double numeric decimal serial blob count sum avg min max",
  },
  css: {
    comments: ["/\\*[\\s\\S]*?(?:\\*/|$)"], strings: [DQ, SQ],
    keywords: "", literals: "",
    types: "",
    extra: [["meta", "@[\\w-]+"], ["kw", "[\\w-]+(?=\\s*:[^;{]*[;}])"], ["var", "#[\\da-fA-F]{3,8}\\b"]],
  },
  json: {
    comments: [], strings: [DQ + "(?=\\s*:)", DQ],
    keywords: "", literals: "true false null", types: "",
    keyClass: "attr",
  },
  yaml: {
    comments: HASH_COMMENT, strings: [DQ, SQ],
    keywords: "", literals: "true false null yes no on off", types: "",
    extra: [["attr", "^[ \\t-]*[\\w.-]+(?=[ \\t]*:)"]],
  },
  markup: {
    comments: ["<!--[\\s\\S]*?(?:-->|$)"], strings: [DQ, SQ],
    keywords: "", literals: "", types: "",
    extra: [["kw", "</?[\\w:-]+|/?>"], ["attr", "\\b[\\w:-]+(?==)"]],
    markup: true,
  },
};
const ALIASES = {
  js: "javascript", jsx: "javascript", mjs: "javascript", cjs: "javascript", ts: "javascript",
  typescript: "javascript", tsx: "javascript", node: "javascript",
  py: "python", python3: "python", py3: "python",
  cpp: "c", "c++": "c", cc: "c", cxx: "c", h: "c", hpp: "c", cuda: "c", cu: "c", "objective-c": "c",
  kotlin: "java", kt: "java", scala: "java", dart: "java", swift: "java",
  cs: "csharp", "c#": "csharp",
  golang: "go", rs: "rust",
  sh: "bash", shell: "bash", zsh: "bash", console: "bash", shellscript: "bash", ps: "bash",
  powershell: "bash", dockerfile: "bash", makefile: "bash", make: "bash", toml: "yaml",
  ini: "yaml", yml: "yaml", mysql: "sql", postgresql: "sql", postgres: "sql", sqlite: "sql",
  scss: "css", less: "css", jsonc: "json", json5: "json",
  html: "markup", xml: "markup", svg: "markup", vue: "markup", xhtml: "markup",
};

const compiled = new Map();

function compile(name) {
  const L = LANGS[name];
  const parts = [];
  const kinds = [];
  const add = (kind, src) => { parts.push(`(${src})`); kinds.push(kind); };
  for (const c of L.comments) add("comment", c);
  for (const [kind, src] of L.extra || []) add(kind, src);
  L.strings.forEach((s, k) => add(k === 0 && L.keyClass ? L.keyClass : "string", s));
  if (!L.markup) add("number", NUMBER);
  add("word", "[A-Za-z_$][\\w$]*");
  const norm = L.nocase ? (w) => w.toLowerCase() : (w) => w;
  return {
    re: new RegExp(parts.join("|"), "gm"), kinds, norm,
    keywords: words(L.keywords), literals: words(L.literals), types: words(L.types),
    markup: !!L.markup,
  };
}

function language(lang) {
  const name = String(lang || "").toLowerCase();
  const key = LANGS[name] ? name : ALIASES[name];
  if (!key) return null;
  if (!compiled.has(key)) compiled.set(key, compile(key));
  return compiled.get(key);
}

export function highlight(code, lang) {
  const L = language(lang);
  if (!L) return esc(code);
  let out = "";
  let last = 0;
  let inTag = !L.markup;
  L.re.lastIndex = 0;
  for (let m; (m = L.re.exec(code));) {
    if (m[0] === "") { L.re.lastIndex++; continue; }
    const k = m.slice(1).findIndex((g) => g !== undefined);
    let kind = L.kinds[k];
    const text = m[0];
    if (L.markup) {           // markup: strings and attributes only count inside a tag
      if (kind === "kw") inTag = !text.endsWith(">");
      else if (!inTag && kind !== "comment") continue;
    }
    out += esc(code.slice(last, m.index));
    last = m.index + text.length;
    if (kind === "word") {
      const w = L.norm(text);
      kind = L.keywords.has(w) ? "kw" : L.literals.has(w) ? "lit" : L.types.has(w) ? "type"
        : /^\s*\(/.test(code.slice(last, last + 8)) ? "fn" : "";
    }
    out += kind ? `<span class="tok-${kind}">${esc(text)}</span>` : esc(text);
  }
  return out + esc(code.slice(last));
}

export const LANGUAGES = Object.keys(LANGS).concat(Object.keys(ALIASES));
