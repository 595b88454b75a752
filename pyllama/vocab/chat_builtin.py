"""llama.cpp's built-in chat formats (src/llama-chat.cpp: LLM_CHAT_TEMPLATES, llm_chat_detect_template,
llm_chat_apply_template): the non-Jinja path (`--no-jinja`, or `--chat-template NAME`).

`detect(source)` names the format of a Jinja template by llama.cpp's substring heuristics;
`BuiltinTemplate(name)` renders OpenAI-style messages ({"role", "content"} with string content)
the way llm_chat_apply_template writes them. Names llama.cpp knows but pyllama does not format
yet raise TemplateError naming them.
"""
from __future__ import annotations

from ..errors import TemplateError

# every name of llama.cpp 0c1e570's LLM_CHAT_TEMPLATES, in its order
LLAMACPP_NAMES = (
    "chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1",
    "mistral-v3", "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken", "phi3", "phi4",
    "falcon3", "zephyr", "monarch", "gemma", "orion", "openchat", "vicuna", "vicuna-orca",
    "deepseek", "deepseek2", "deepseek3", "deepseek-ocr", "command-r", "llama3", "chatglm3",
    "chatglm4", "glmedge", "minicpm", "exaone3", "exaone4", "exaone-moe", "rwkv-world",
    "granite", "granite-4.0", "granite-4.1", "gigachat", "megrez", "yandex", "bailing",
    "bailing-think", "bailing2", "llama4", "smolvlm", "hunyuan-moe", "gpt-oss", "hunyuan-dense",
    "hunyuan-vl", "kimi-k2", "seed_oss", "grok-2", "pangu-embedded", "solar-open")


def _trim(s: str) -> str:
    """llama-chat.cpp's trim: leading and trailing ASCII whitespace."""
    return s.strip(" \t\n\r\f\v")


def detect(tmpl: str) -> str | None:
    """llm_chat_detect_template: a format name for a template's source (None: unknown). The
    checks are llama.cpp's, in its order; formats detected but not rendered here come back by
    name too (rendering them raises)."""
    if tmpl in LLAMACPP_NAMES:
        return tmpl
    has = tmpl.__contains__
    if has("<|im_start|>"):
        return "phi4" if has("<|im_sep|>") else "smolvlm" if has("<end_of_utterance>") \
            else "chatml"
    if tmpl.startswith("mistral") or has("[INST]"):
        if has("[SYSTEM_PROMPT]"):
            return "mistral-v7"
        if has("' [INST] ' + system_message") or has("[AVAILABLE_TOOLS]"):
            if has(" [INST]"):
                return "mistral-v1"
            return "mistral-v3-tekken" if has('"[INST]"') else "mistral-v3"
        if has("content.strip()"):
            return "llama2-sys-strip"
        if has("bos_token + '[INST]"):
            return "llama2-sys-bos"
        return "llama2-sys" if has("<<SYS>>") else "llama2"
    if has("<|assistant|>") and has("<|end|>"):
        return "phi3"
    if has("[gMASK]<sop>"):
        return "chatglm4"
    if has("<|assistant|>") and has("<|user|>"):
        if has("<|tool_declare|>"):
            return "exaone-moe"
        return "falcon3" if has("</s>") else "glmedge"
    if has("<|{{ item['role'] }}|>") and has("<|begin_of_image|>"):
        return "glmedge"
    if has("<|user|>") and has("<|endoftext|>"):
        return "zephyr"
    if has("bos_token + message['role']"):
        return "monarch"
    if has("<start_of_turn>"):
        return "gemma"
    if has("'\\n\\nAssistant: ' + eos_token"):
        return "orion"
    if has("GPT4 Correct "):
        return "openchat"
    if has("USER: ") and has("ASSISTANT: "):
        return "vicuna-orca" if has("SYSTEM: ") else "vicuna"
    if has("### Instruction:") and has("<|EOT|>"):
        return "deepseek"
    if has("<|START_OF_TURN_TOKEN|>") and has("<|USER_TOKEN|>"):
        return "command-r"
    if has("<|start_header_id|>") and has("<|end_header_id|>"):
        return "llama3"
    if has("[gMASK]sop"):
        return "chatglm3"
    if has("<用户>"):
        return "minicpm"
    if has("'Assistant: ' + message['content'] + eos_token"):
        return "deepseek2"
    if has("<｜Assistant｜>") and has("<｜User｜>") and has("<｜end▁of▁sentence｜>"):
        return "deepseek3"
    if has("[|system|]") and has("[|assistant|]") and has("[|endofturn|]"):
        return "exaone4" if has("[|tool|]") else "exaone3"
    if has("<|start_of_role|>"):
        return "granite"
    if has("<|header_start|>") and has("<|header_end|>"):
        return "llama4"
    return None


def _chatml(msgs, add):
    out = "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in msgs)
    return out + ("<|im_start|>assistant\n" if add else "")


def _mistral_v7(space):
    def fmt(msgs, add):
        out = ""
        for r, c in msgs:
            if r == "system":
                out += f"[SYSTEM_PROMPT]{space}{c}[/SYSTEM_PROMPT]"
            elif r == "user":
                out += f"[INST]{space}{c}[/INST]"
            else:
                out += f"{space}{c}</s>"
        return out
    return fmt


def _mistral_v1_v3(lead, trail, trim_assistant):
    def fmt(msgs, add):
        out, inside = "", False
        for r, c in msgs:
            if not inside:
                out += f"{lead}[INST]{trail}"
                inside = True
            if r == "system":
                out += c + "\n\n"
            elif r == "user":
                out += f"{c}{lead}[/INST]"
            else:
                out += trail + (_trim(c) if trim_assistant else c) + "</s>"
                inside = False
        return out
    return fmt


def _llama2(system, bos_inside, strip):
    def fmt(msgs, add):
        out, inside = "[INST] ", True
        for r, c in msgs:
            c = _trim(c) if strip else c
            if not inside:
                inside = True
                out += "<s>[INST] " if bos_inside else "[INST] "
            if r == "system":
                out += f"<<SYS>>\n{c}\n<</SYS>>\n\n" if system else c + "\n"
            elif r == "user":
                out += c + " [/INST]"
            else:
                out += c + "</s>"
                inside = False
        return out
    return fmt


def _tagged(open_, sep, close, gen):
    """<|role|>{sep}content{close} per message, then the generation prompt."""
    def fmt(msgs, add):
        return "".join(f"{open_(r)}{sep}{c}{close}" for r, c in msgs) + (gen if add else "")
    return fmt


def _monarch(msgs, add):
    out = "".join(("" if i == 0 else "<s>") + f"{r}\n{c}</s>\n" for i, (r, c) in enumerate(msgs))
    return out + ("<s>assistant\n" if add else "")


def _gemma(msgs, add):
    out, system = "", ""
    for r, c in msgs:
        if r == "system":
            system += _trim(c)
            continue
        role = "model" if r == "assistant" else r
        out += f"<start_of_turn>{role}\n"
        if system and role != "model":
            out += system + "\n\n"
            system = ""
        out += _trim(c) + "<end_of_turn>\n"
    return out + ("<start_of_turn>model\n" if add else "")


def _orion(msgs, add):
    out, system = "", ""
    for r, c in msgs:
        if r == "system":
            system += c
        elif r == "user":
            out += "Human: " + (system + "\n\n" if system else "") + c + "\n\nAssistant: </s>"
            system = ""
        else:
            out += c + "</s>"
    return out


def _openchat(msgs, add):
    out = ""
    for r, c in msgs:
        out += f"{c}<|end_of_turn|>" if r == "system" else \
            f"GPT4 Correct {r[:1].upper() + r[1:]}: {c}<|end_of_turn|>"
    return out + ("GPT4 Correct Assistant:" if add else "")


def _vicuna(orca):
    def fmt(msgs, add):
        out = ""
        for r, c in msgs:
            if r == "system":
                out += f"SYSTEM: {c}\n" if orca else c + "\n\n"
            elif r == "user":
                out += f"USER: {c}\n"
            elif r == "assistant":
                out += f"ASSISTANT: {c}</s>\n"
        return out + ("ASSISTANT:" if add else "")
    return fmt


def _by_role(system, user, assistant, gen):
    """Per-role wrappers (format strings with {c}); other roles are skipped."""
    def fmt(msgs, add):
        parts = {"system": system, "user": user, "assistant": assistant}
        return "".join(parts[r](c) for r, c in msgs if r in parts) + (gen if add else "")
    return fmt


def _minicpm(msgs, add):
    return "".join(f"<用户>{_trim(c)}<AI>" if r == "user" else _trim(c) for r, c in msgs)


_END = "<｜end▁of▁sentence｜>"
FORMATS = {
    "chatml": _chatml,
    "mistral-v7": _mistral_v7(" "), "mistral-v7-tekken": _mistral_v7(""),
    "mistral-v1": _mistral_v1_v3(" ", " ", False), "mistral-v3": _mistral_v1_v3("", " ", True),
    "mistral-v3-tekken": _mistral_v1_v3("", "", False),
    "llama2": _llama2(False, False, False), "llama2-sys": _llama2(True, False, False),
    "llama2-sys-bos": _llama2(True, True, False), "llama2-sys-strip": _llama2(True, False, True),
    "phi3": _tagged(lambda r: f"<|{r}|>", "\n", "<|end|>\n", "<|assistant|>\n"),
    "phi4": _tagged(lambda r: f"<|im_start|>{r}", "<|im_sep|>", "<|im_end|>",
                    "<|im_start|>assistant<|im_sep|>"),
    "falcon3": _tagged(lambda r: f"<|{r}|>", "\n", "\n", "<|assistant|>\n"),
    "zephyr": _tagged(lambda r: f"<|{r}|>", "\n", "<|endoftext|>\n", "<|assistant|>\n"),
    "monarch": _monarch, "gemma": _gemma, "orion": _orion, "openchat": _openchat,
    "vicuna": _vicuna(False), "vicuna-orca": _vicuna(True),
    "deepseek": _by_role(lambda c: c, lambda c: f"### Instruction:\n{c}\n",
                         lambda c: f"### Response:\n{c}\n<|EOT|>\n", "### Response:\n"),
    "command-r": _by_role(
        lambda c: f"<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>{_trim(c)}<|END_OF_TURN_TOKEN|>",
        lambda c: f"<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{_trim(c)}<|END_OF_TURN_TOKEN|>",
        lambda c: f"<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{_trim(c)}<|END_OF_TURN_TOKEN|>",
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"),
    "llama3": lambda msgs, add: "".join(
        f"<|start_header_id|>{r}<|end_header_id|>\n\n{_trim(c)}<|eot_id|>" for r, c in msgs)
        + ("<|start_header_id|>assistant<|end_header_id|>\n\n" if add else ""),
    "chatglm3": lambda msgs, add: "[gMASK]sop" + "".join(f"<|{r}|>\n {c}" for r, c in msgs)
        + ("<|assistant|>" if add else ""),
    "chatglm4": lambda msgs, add: "[gMASK]<sop>" + "".join(f"<|{r}|>\n{c}" for r, c in msgs)
        + ("<|assistant|>\n" if add else ""),
    "glmedge": _tagged(lambda r: f"<|{r}|>", "\n", "", "<|assistant|>"),
    "minicpm": _minicpm,
    "deepseek2": _by_role(lambda c: c + "\n\n", lambda c: f"User: {c}\n\n",
                          lambda c: f"Assistant: {c}{_END}", "Assistant:"),
    "deepseek3": _by_role(lambda c: c + "\n\n", lambda c: f"<｜User｜>{c}",
                          lambda c: f"<｜Assistant｜>{c}{_END}", "<｜Assistant｜>"),
    "deepseek-ocr": lambda msgs, add: "".join(c for _, c in msgs),
}


class BuiltinTemplate:
    """A llama.cpp built-in format with ChatTemplate's apply(); `source` is its name."""

    requires_object_arguments = False

    def __init__(self, name: str):
        if name not in FORMATS:
            raise TemplateError(f"built-in chat template '{name}' is not supported by pyllama yet"
                                if name in LLAMACPP_NAMES else f"unknown chat template '{name}'")
        self.name = self.source = name
        self._fmt = FORMATS[name]

    def apply(self, messages: list[dict], add_generation_prompt: bool = True, tools=None,
              **kwargs) -> str:
        msgs = [(str(m.get("role", "")), m.get("content") or "") for m in messages]
        for _, c in msgs:
            if not isinstance(c, str):
                raise TemplateError("the built-in chat formats take string content")
        return self._fmt(msgs, add_generation_prompt)
