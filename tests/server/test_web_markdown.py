"""The web page's JavaScript that needs no browser (pyllama/server/web/), run with node: the
escape-first Markdown renderer and code highlighter (hostile inputs must come out as text, and the
HTML built may only use the renderer's own tags and attributes, links with an allowed scheme
only), and the reader of streamed chat answers (SSE framing, content / reasoning_content /
tool_calls deltas in the OpenAI streaming format llama-server sends). Skipped when node is
missing."""
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

WEB = Path(__file__).resolve().parents[2] / "pyllama" / "server" / "web"

# what the renderer may build: tag -> attributes
ALLOWED = {
    "p": set(), "br": set(), "strong": set(), "em": set(), "del": set(), "code": {"class"},
    "pre": set(), "h1": set(), "h2": set(), "h3": set(), "h4": set(), "h5": set(), "h6": set(),
    "ul": set(), "ol": {"start"}, "li": {"class"}, "blockquote": set(), "hr": set(),
    "a": {"href", "class", "target", "rel"}, "span": {"class"}, "div": {"class"},
    "button": {"type", "class", "aria-label"}, "table": set(), "thead": set(), "tbody": set(),
    "tr": set(), "th": {"class"}, "td": {"class"}, "input": {"type", "disabled", "checked"},
}
CLASS = re.compile(r"^(hl( language-[\w+#.-]+)?|code-block( open)?|code-head|code-lang|copy-code|"
                   r"table-wrap|math|task|image-link|align-(left|right|center)|tok-\w+)$")


class Check(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.hrefs, self.text = [], []

    def handle_starttag(self, tag, attrs):
        assert tag in ALLOWED, f"unexpected tag <{tag}>"
        for name, value in attrs:
            assert name in ALLOWED[tag], f"unexpected attribute {name} on <{tag}>"
            if name == "class":
                assert CLASS.match(value), f"unexpected class {value!r}"
            if name == "href":
                self.hrefs.append(value)
                scheme = re.match(r"^([^:/?#]*):", value)
                assert scheme is None or scheme.group(1).lower() in ("http", "https", "mailto"), \
                    value
                assert not re.search(r"[\x00-\x20\x7f]", value), repr(value)
            if name == "start":
                assert value.isdigit()
            if name in ("target", "rel", "type"):
                assert value in ("_blank", "noopener noreferrer", "button", "checkbox"), value

    def handle_data(self, data):
        self.text.append(data)


def check_html(html: str) -> Check:
    c = Check()
    c.feed(html)
    c.close()
    return c


@pytest.fixture(scope="module")
def render(tmp_path_factory):
    """render(list of (function, *args)) -> list of outputs, one node run per call."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the Markdown renderer is JavaScript)")
    d = tmp_path_factory.mktemp("web")
    for f in ("markdown.js", "highlight.js", "api.js"):
        shutil.copy(WEB / f, d / f)
    (d / "package.json").write_text('{"type": "module"}')
    (d / "run.js").write_text(RUNNER)

    def run(calls):
        out = subprocess.run([node, str(d / "run.js")], input=json.dumps(calls),
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)
    return run


# node side: each call is [function name, *arguments]; `stream` feeds the given byte chunks to
# the page's SSE reader as one response body and folds the events into a message
RUNNER = """
import { renderMarkdown, inline } from "./markdown.js";
import { highlight } from "./highlight.js";
import { events, applyChunk, errorText } from "./api.js";
async function stream(chunks) {
  const enc = new TextEncoder();
  const body = new ReadableStream({ start(c) { for (const x of chunks) c.enqueue(enc.encode(x));
                                              c.close(); } });
  const msg = { content: "" };
  try {
    for await (const ev of events(new Response(body))) applyChunk(msg, ev);
  } catch (e) { msg.thrown = e.message; }
  return msg;
}
const status = (body, code) => errorText(new Response(body, { status: code }));
const fns = { renderMarkdown, inline, highlight, stream, status };
let src = ""; process.stdin.on("data", (c) => src += c);
process.stdin.on("end", async () => { const calls = JSON.parse(src);
  const out = []; for (const [f, ...a] of calls) out.push(await fns[f](...a));
  console.log(JSON.stringify(out)); });
"""


HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "<a href=\"javascript:alert(1)\">x</a>",
    "[x](javascript:alert(1))",
    "[x](JavaScript:alert(1))",
    "[x](java\tscript:alert(1))",
    "[x](\u0001javascript:alert(1))",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[x](vbscript:msgbox(1))",
    "[x](&#106;avascript:alert(1))",
    "[x](javascript&#58;alert(1))",
    "[x](<javascript:alert(1)>)",
    "<javascript:alert(1)>",
    "![x](javascript:alert(1))",
    "[x](https://a.example/\"onmouseover=\"alert(1))",
    "[<img src=x onerror=alert(1)>](https://a.example/)",
    "**<b onclick=alert(1)>bold</b>**",
    "`<script>alert(1)</script>`",
    "```\n</code></pre><script>alert(1)</script>\n```",
    "```\"><script>alert(1)</script>\nx\n```",
    "```html\n<div onclick=\"alert(1)\">hi</div>\n<!-- <script> -->",
    "| a | <b>b</b> |\n|---|---|\n| <script>x</script> | [y](javascript:z) |",
    "- <svg onload=alert(1)>\n- [ ] <iframe src=x>",
    "> <style>*{}</style>\n> ok",
    "# <h1 onclick=x>title</h1>",
    "https://a.example/\"><script>alert(1)</script>",
    "<https://a.example/?q=\"onmouseover=alert(1)>",
    "$<script>alert(1)</script>$ and \\<b\\>",
    "a\u0000b <\u0000script>",
    "&lt;script&gt;alert(1)&lt;/script&gt;",
]


@pytest.fixture(scope="module")
def hostile(render):
    return dict(zip(HOSTILE, render([["renderMarkdown", src] for src in HOSTILE])))


@pytest.mark.parametrize("src", HOSTILE)
def test_hostile_input_stays_text(hostile, src):
    html = hostile[src]
    check_html(html)
    # no raw tag from the input survives: every '<' of the source is escaped
    for tag in ("script", "img", "iframe", "svg", "style", "b ", "div ", "h1 "):
        assert f"<{tag}" not in html.lower().replace("<div class=", "").replace("<b>", "")
    assert "javascript:" not in " ".join(check_html(html).hrefs).lower()


def test_html_like_text_is_shown_verbatim(render):
    src = "Use <div class=\"x\"> & </div>, or &amp; literally."
    [html] = render([["renderMarkdown", src]])
    assert html == ("<p>Use &lt;div class=&quot;x&quot;&gt; &amp; &lt;/div&gt;, or &amp;amp; "
                    "literally.</p>")
    assert "".join(check_html(html).text) == src


def test_links_keep_safe_schemes_only(render):
    out = render([["inline", "[a](https://a.example/x_y?p=1&q=2)"],
                  ["inline", "[b](mailto:me@example.com)"],
                  ["inline", "[c](/relative/path#frag)"],
                  ["inline", "[d](javascript:alert(1))"],
                  ["inline", "see https://a.example/wiki/Foo_(bar))."],
                  ["inline", "![pic](https://a.example/p.png)"]])
    assert out[0] == ('<a href="https://a.example/x_y?p=1&amp;q=2" target="_blank" '
                      'rel="noopener noreferrer">a</a>')
    assert check_html(out[1]).hrefs == ["mailto:me@example.com"]
    assert check_html(out[2]).hrefs == ["/relative/path#frag"]
    assert out[3] == "d"                       # an unsafe link keeps its text, loses the link
    assert check_html(out[4]).hrefs == ["https://a.example/wiki/Foo_(bar)"]
    assert out[4].endswith("</a>).")
    # images are never loaded: a link to them instead
    assert "<img" not in out[5] and 'class="image-link"' in out[5]


def test_unclosed_fence_is_a_code_block_to_the_end(render):
    [html] = render([["renderMarkdown", "Here:\n```python\ndef f():\n    return '<b>'\n"]])
    check_html(html)
    assert html.startswith('<p>Here:</p><div class="code-block open">')
    assert '<span class="code-lang">python</span>' in html
    assert '<button type="button" class="copy-code" aria-label="Copy code">Copy</button>' in html
    assert ('<span class="tok-kw">return</span> <span class="tok-string">&#39;&lt;b&gt;&#39;'
            '</span>') in html


def test_block_structure(render):
    src = ("# Title\n\nSome *em* and **strong** and `code` and ~~gone~~\nnext line\n\n"
           "- one\n- two\n  - nested\n\n3. three\n4. four\n\n> quoted\n\n---\n\n"
           "| a | b |\n|:--|--:|\n| 1 | **2** |\n\n```js\nconst x = 1; // c\n```\n")
    [html] = render([["renderMarkdown", src]])
    check_html(html)
    assert html == (
        "<h1>Title</h1>"
        "<p>Some <em>em</em> and <strong>strong</strong> and <code>code</code> and "
        "<del>gone</del><br>next line</p>"
        "<ul><li>one</li><li>two<ul><li>nested</li></ul></li></ul>"
        '<ol start="3"><li>three</li><li>four</li></ol>'
        "<blockquote><p>quoted</p></blockquote><hr>"
        '<div class="table-wrap"><table><thead><tr><th class="align-left">a</th>'
        '<th class="align-right">b</th></tr></thead><tbody><tr><td class="align-left">1</td>'
        '<td class="align-right"><strong>2</strong></td></tr></tbody></table></div>'
        '<div class="code-block"><div class="code-head"><span class="code-lang">js</span>'
        '<button type="button" class="copy-code" aria-label="Copy code">Copy</button></div>'
        '<pre><code class="hl language-js"><span class="tok-kw">const</span> x = '
        '<span class="tok-number">1</span>; <span class="tok-comment">// c</span>'
        "</code></pre></div>")


def test_emphasis_leaves_code_words_and_math_alone(render):
    out = render([["inline", "snake_case_name and 2 * 3 * 4"],
                  ["inline", "$a_1 * b_2$ costs $5 and $6"],
                  ["inline", "\\*not em\\* and `a*b*c`"]])
    assert out[0] == "snake_case_name and 2 * 3 * 4"
    assert out[1] == '<span class="math">$a_1 * b_2$</span> costs $5 and $6'
    assert out[2] == "*not em* and <code>a*b*c</code>"


def test_highlighter_escapes_every_token(render):
    out = render([["highlight", "x = \"</code><script>\"  # <b>", "python"],
                  ["highlight", "<a href=\"x\">&amp;</a>", "html"],
                  ["highlight", "<b>plain</b>", "no-such-language"]])
    for html in out:
        check_html(html)
        assert "<script" not in html and "<b>" not in html and "<a " not in html
    assert out[0] == ('x = <span class="tok-string">&quot;&lt;/code&gt;&lt;script&gt;&quot;'
                      '</span>  <span class="tok-comment"># &lt;b&gt;</span>')
    assert out[2] == "&lt;b&gt;plain&lt;/b&gt;"


def _sse(*objs) -> str:
    return "".join(f"data: {json.dumps(o)}\n\n" for o in objs)


def _delta(**d) -> dict:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d}]}


def test_stream_folds_reasoning_content_and_tool_calls(render):
    body = _sse(_delta(role="assistant", content=None),
                _delta(reasoning_content="Let me"), _delta(reasoning_content=" think."))
    body += ": keep-alive\n\n"                           # SSE comment (--sse-ping-interval)
    body += _sse(_delta(content="Calling"), _delta(content=" it."),
                 _delta(tool_calls=[{"index": 0, "id": "call_1", "type": "function",
                                     "function": {"name": "get_weather", "arguments": "{\"ci"}}]),
                 _delta(tool_calls=[{"index": 0, "function": {"arguments": "ty\": \"Paris\"}"}}]),
                 _delta(tool_calls=[{"index": 1, "id": "call_2", "type": "function",
                                     "function": {"name": "now", "arguments": "{}"}}]),
                 {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                  "timings": {"prompt_n": 7, "predicted_n": 5}})
    body += "data: [DONE]\n\n" + _sse(_delta(content=" after the end"))
    # the same bytes cut at awkward places, and with CRLF line ends
    cuts = [body[i:i + 7] for i in range(0, len(body), 7)]
    crlf = body.replace("\n", "\r\n")
    crlf_cuts = [crlf[i:i + 5] for i in range(0, len(crlf), 5)]
    want = {"content": "Calling it.", "reasoning": "Let me think.",
            "toolCalls": [{"id": "call_1", "type": "function",
                           "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                          {"id": "call_2", "type": "function",
                           "function": {"name": "now", "arguments": "{}"}}],
            "finish": "tool_calls", "timings": {"prompt_n": 7, "predicted_n": 5}}
    assert render([["stream", [body]], ["stream", cuts], ["stream", crlf_cuts]]) == [want] * 3


def test_stream_error_and_http_error_text(render):
    err = {"error": {"code": 500, "message": "the model crashed", "type": "server_error"}}
    out = render([["stream", [_sse(_delta(content="par"), err)]],
                  ["status", json.dumps({"error": {"code": 503, "message": "Loading model",
                                                   "type": "unavailable_error"}}), 503],
                  ["status", "plain failure\n", 500]])
    assert out[0] == {"content": "par", "thrown": "the model crashed"}
    assert out[1:] == ["Loading model", "plain failure"]


def test_code_fence_inside_a_list_item(render):
    """A fence indented under an item belongs to it (its blank lines do not make the list
    loose, a '-' line inside it is code, not an item)."""
    [html] = render([["renderMarkdown",
                      "1. Install:\n   ```bash\n   pip install x\n\n   - not an item\n   ```\n"
                      "2. Run it\n\nDone."]])
    check_html(html)
    assert html == (
        '<ol><li>Install:<div class="code-block"><div class="code-head">'
        '<span class="code-lang">bash</span><button type="button" class="copy-code" '
        'aria-label="Copy code">Copy</button></div><pre><code class="hl language-bash">'
        '<span class="tok-type">pip</span> install x\n\n- not an item</code></pre></div></li>'
        "<li>Run it</li></ol><p>Done.</p>")
