"""Chat templates: llama-server --jinja /apply-template output reproduced exactly, the jinja
extras, the ChatML fallback, built-in names and errors."""
import pytest

from vocabsupport import load_data
from pyllama.errors import TemplateError
from pyllama.vocab import ChatTemplate

REF = load_data("chat-templates.json")


class FakeVocab:
    """Only what ChatTemplate.for_model reads from a Vocab (the real ones are tested below)."""
    def __init__(self, template):
        self.chat_template, self.bos, self.eos = template, 0, 1

    def token_text(self, id):
        return ["<s>", "</s>"][id]


@pytest.mark.parametrize("model,case", [(m, c) for m in ("qwen2.5-coder-0.5b", "gemma-3-270m")
                                        for c in REF[m]])
def test_matches_llama_server(model, case):
    req = REF[model][case]["request"]
    tmpl = ChatTemplate.for_model(FakeVocab(REF["templates"][model]))
    out = tmpl.apply(req["messages"], add_generation_prompt=True, tools=req.get("tools"))
    assert out == REF[model][case]["prompt"]


@pytest.mark.realmodel
def test_real_vocab_templates(gemma_vocab, qwen_vocab):
    assert gemma_vocab.chat_template is None
    assert qwen_vocab.chat_template == REF["templates"]["qwen2.5-coder-0.5b"]
    msgs = REF["qwen2.5-coder-0.5b"]["single"]["request"]["messages"]
    assert ChatTemplate.for_model(qwen_vocab).apply(msgs) == \
        REF["qwen2.5-coder-0.5b"]["single"]["prompt"]
    assert ChatTemplate.for_model(qwen_vocab).bos_token == "<|endoftext|>"


def test_object_arguments_probe():
    assert ChatTemplate(REF["templates"]["qwen2.5-coder-0.5b"]).requires_object_arguments
    plain = "{% for m in messages %}{{ m.tool_calls[0].function.arguments if m.tool_calls }}" \
            "{% endfor %}"
    t = ChatTemplate(plain)
    assert not t.requires_object_arguments
    call = {"type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    assert t.apply([{"role": "assistant", "content": "", "tool_calls": [call]}]) == '{"a": 1}'


def test_generation_prompt_and_fallback():
    t = ChatTemplate(None)
    msgs = [{"role": "user", "content": "hi"}]
    assert t.apply(msgs) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert t.apply(msgs, add_generation_prompt=False) == "<|im_start|>user\nhi<|im_end|>\n"


def test_extras():
    src = ("{{ bos_token }}{{ {'z': 'ü', 'a': [1, 2]} | tojson }}|"
           "{{ strftime_now('%Y') | length }}"
           "|{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}"
           "{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}|{{ extra }}")
    out = ChatTemplate(src, bos_token="<s>").apply([], extra="kw")
    assert out == '<s>{"z": "ü", "a": [1, 2]}|4|02|kw'
    # trim_blocks / lstrip_blocks: block tags leave no blank lines or indentation behind
    assert ChatTemplate("  {% if true %}\nx\n  {% endif %}\ny").apply([]) == "x\ny"


def test_builtin_names():
    v = FakeVocab(None)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": " hi "},
            {"role": "assistant", "content": "yo"}, {"role": "user", "content": "q"}]
    assert ChatTemplate.for_model(v, "gemma").apply(msgs) == (
        "<start_of_turn>user\nS\n\nhi<end_of_turn>\n<start_of_turn>model\nyo<end_of_turn>\n"
        "<start_of_turn>user\nq<end_of_turn>\n<start_of_turn>model\n")
    assert ChatTemplate.for_model(v, "llama3").apply(msgs[1:2]) == (
        "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert ChatTemplate.for_model(v, "chatml").apply(msgs[:1], add_generation_prompt=False) == \
        "<|im_start|>system\nS<|im_end|>\n"
    assert ChatTemplate.for_model(v, "{{ messages | length }}").apply(msgs) == "4"
    one = msgs[1:2]
    assert ChatTemplate.for_model(v, "phi4").apply(one) == \
        "<|im_start|>user<|im_sep|> hi <|im_end|><|im_start|>assistant<|im_sep|>"
    assert ChatTemplate.for_model(v, "falcon3").apply(one) == "<|user|>\n hi \n<|assistant|>\n"
    assert ChatTemplate.for_model(v, "granite").apply(one) == (
        "<|start_of_role|>user<|end_of_role|> hi <|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|>")
    assert ChatTemplate.for_model(v, "llama4").apply(one) == (
        "<|header_start|>user<|header_end|>\n\nhi<|eot|>"
        "<|header_start|>assistant<|header_end|>\n\n")


def test_errors_are_template_errors():
    with pytest.raises(TemplateError, match="syntax error"):
        ChatTemplate("{% for %}")
    with pytest.raises(TemplateError, match="no system role"):
        ChatTemplate("{{ raise_exception('no system role') }}").apply([])
    with pytest.raises(TemplateError):
        # undefined + number: an error in llama.cpp's runtime too (string + number is not)
        ChatTemplate("{{ messages[0].missing + 1 }}").apply([{"role": "user", "content": "x"}])
    with pytest.raises(TemplateError):   # the sandbox refuses attribute writes / internals
        ChatTemplate("{{ messages.__class__.__subclasses__() }}").apply([])
