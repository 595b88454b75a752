"""llama.cpp's built-in chat formats (src/llama-chat.cpp) for --no-jinja and --chat-template NAME.
Expected strings: llama.cpp's own server tests (tools/server/tests/unit/test_chat_completion.py)
and its tests/test-chat-template.cpp outputs for the same conversations."""
import pytest

from pyllama.errors import TemplateError
from pyllama.vocab.chat_builtin import FORMATS, LLAMACPP_NAMES, BuiltinTemplate, detect

SYS_USER = [{"role": "system", "content": "You are a test."},
            {"role": "user", "content": "Hi there"}]
CONV = [{"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "Who are you"},
        {"role": "assistant", "content": "   I am an assistant   "},
        {"role": "user", "content": "Another question"}]


def test_command_r_as_llamacpp_server_test():
    assert BuiltinTemplate("command-r").apply(SYS_USER) == (
        "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>"
        "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>")


def test_llama3_as_llamacpp_server_test():
    msgs = [{"role": "system", "content": "Book"},
            {"role": "user", "content": "What is the best book"}]
    assert BuiltinTemplate("llama3").apply(msgs) == (
        "<|start_header_id|>system<|end_header_id|>\n\nBook<|eot_id|><|start_header_id|>user"
        "<|end_header_id|>\n\nWhat is the best book<|eot_id|><|start_header_id|>assistant"
        "<|end_header_id|>\n\n")


# tests/test-chat-template.cpp expected outputs for CONV (llama.cpp 0c1e570)
EXPECTED = {
    "chatml": "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\n"
              "Hello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\n"
              "Who are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n"
              "<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n",
    "llama2-sys": "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi "
                  "there</s>[INST] Who are you [/INST]   I am an assistant   </s>[INST] Another "
                  "question [/INST]",
    "gemma": "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
             "<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you"
             "<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n"
             "<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n",
    "mistral-v7": "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST]"
                  " Hi there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] "
                  "Another question[/INST]",
    "zephyr": "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello"
              "<|endoftext|>\n<|assistant|>\nHi there<|endoftext|>\n<|user|>\nWho are you"
              "<|endoftext|>\n<|assistant|>\n   I am an assistant   <|endoftext|>\n<|user|>\n"
              "Another question<|endoftext|>\n<|assistant|>\n",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_formats_as_llamacpp_test_chat_template(name):
    assert BuiltinTemplate(name).apply(CONV) == EXPECTED[name]


def _recorded():
    import json
    import os
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                        "llamacpp_chat_templates.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)["cases"]


def test_llamacpp_test_chat_template_cases():
    """Every case of llama.cpp's tests/test-chat-template.cpp (recorded by
    scripts/extract_llamacpp_chat_templates.py) whose detected format is ported: same text."""
    cases = _recorded()
    checked = 0
    for case in cases:
        name = detect(case["template"])
        if name in FORMATS:
            assert BuiltinTemplate(name).apply(CONV) == case["expected"], case["name"]
            checked += 1
    assert len(cases) >= 30 and checked >= 24


def test_detect_from_template_source():
    assert detect("{% for m in messages %}<|im_start|>{{ m.role }}") == "chatml"
    assert detect("<start_of_turn>user") == "gemma"
    assert detect("{{ '<|start_header_id|>' }}{{ '<|end_header_id|>' }}") == "llama3"
    assert detect("[INST] <<SYS>>") == "llama2-sys"
    assert detect("llama3") == "llama3" and detect("nothing known") is None


def test_every_llamacpp_name_is_known_and_unported_ones_say_so():
    assert set(FORMATS) <= set(LLAMACPP_NAMES) and len(LLAMACPP_NAMES) == 54
    missing = [n for n in LLAMACPP_NAMES if n not in FORMATS]
    with pytest.raises(TemplateError, match="not supported by pyllama yet"):
        BuiltinTemplate(missing[0])
