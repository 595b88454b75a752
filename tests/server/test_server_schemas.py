"""Request validation, response shapes, stop strings and tool-call parsing, without a model."""
import json

import msgspec
import pytest

from pyllama.sampling import SamplerParams
from pyllama.server import schemas as S
from pyllama.server.chat import ToolCallStream, normalize_messages, parse_tool_calls
from pyllama.server.engine import find_stop, partial_stop


def params(raw: bytes, chat=False, **defaults):
    body = S.decode_body(raw, S.ChatBody if chat else S.CompletionBody)
    d = S.RequestDefaults(sampling=SamplerParams(), **defaults)
    return S.build_params(body, d, n_vocab=100, tokenize=lambda s: [ord(c) % 100 for c in s],
                          chat=chat)


def test_malformed_json_is_500_server_error():
    with pytest.raises(S.ServerError) as e:
        S.decode_body(b"{b", S.CompletionBody)
    assert e.value.code == 500 and e.value.type == "server_error"
    assert "parse error" in e.value.message


def test_invalid_utf8_is_500_server_error():
    with pytest.raises(S.ServerError) as e:
        S.decode_body(b'{"prompt": "\xff\xfe"}', S.CompletionBody)
    assert e.value.code == 500


def test_wrong_type_names_the_field():
    with pytest.raises(S.ServerError) as e:
        S.decode_body(b'{"n_predict": "abc"}', S.CompletionBody)
    assert e.value.code == 400 and e.value.type == "invalid_request_error"
    assert e.value.message == "Field 'n_predict': [json.exception.type_error.302] type must be number, but is string"
    with pytest.raises(S.ServerError) as e:
        S.decode_body(b'{"n_predict": 1e10}', S.CompletionBody)
    assert e.value.message == "Field 'n_predict': type must be an integer, but is a float"


@pytest.mark.parametrize("n", [-5, 2**31, 10**30])
def test_n_predict_out_of_range(n):
    with pytest.raises(S.ServerError) as e:
        params(json.dumps({"n_predict": n}).encode())
    assert e.value.code == 400
    assert e.value.message == (f"Field 'n_predict': Value must be between -1 <= value <= "
                               f"2147483647, but got {n}")


def test_aliases_first_present_wins_and_defaults_apply():
    p = params(b'{"max_tokens": 7, "max_completion_tokens": 5}')
    assert p.n_predict == 5
    assert params(b"{}", n_predict=9).n_predict == 9
    assert params(b'{"n_predict": 20}', n_predict=9).n_predict == 20  # the request wins over -n
    assert params(b'{"n_predict": 4}', n_predict=9).n_predict == 4
    assert params(b'{"stop": "x"}').stop == ["x"]
    assert params(b"{}", stop=["END"]).stop == ["END"]


def test_clamps_and_sampler_fields():
    p = params(b'{"temperature": -3, "top_p": 2, "top_k": 7, "seed": -1, "repeat_penalty": 1.1,'
               b' "typical_p": 0.5, "samplers": "kt", "logit_bias": [[3, false], ["a", 2.0]]}')
    s = p.sampling
    assert s.temp == 0.0 and s.top_p == 1.0 and s.top_k == 7 and s.seed == 0xFFFFFFFF
    assert s.penalty_repeat == 1.1 and s.typ_p == 0.5 and s.samplers == ["top_k", "temperature"]
    assert s.logit_bias == {3: float("-inf"), ord("a") % 100: 2.0}
    assert p.settings["temperature"] == 0.0 and p.settings["seed"] == 0xFFFFFFFF


def test_logprobs_fields():
    assert params(b'{"n_probs": 3}').n_probs == 3
    assert params(b'{"logprobs": 2}').n_probs == 2
    assert params(b'{"logprobs": true, "top_logprobs": 4}', chat=True).n_probs == 4
    assert params(b'{"logprobs": true}', chat=True).n_probs == 20
    assert params(b'{"logprobs": false}', chat=True).n_probs == 0


def test_constrained_output_sets_the_grammar():
    from pyllama.grammar import json_schema_to_gbnf
    assert params(b'{"grammar": "root ::= \\"a\\""}').sampling.grammar == 'root ::= "a"'
    any_object = json_schema_to_gbnf({"type": "object"})
    assert params(b'{"json_schema": {}}').sampling.grammar == any_object
    assert params(b'{"response_format": {"type": "json_object"}}', chat=True).sampling.grammar \
        == any_object
    with pytest.raises(S.ServerError) as e:
        params(b'{"grammar": "root ::= x"}')
    assert e.value.code == 400 and "Undefined rule identifier 'x'" in e.value.message


def test_response_format_text_is_fine():
    assert params(b'{"response_format": {"type": "text"}}').n_predict == -1


def test_exceed_context_body():
    body = S.exceed_context(302, 256).body()
    assert body == {"error": {"code": 400, "message": "request (302 tokens) exceeds the available "
                              "context size (256 tokens), try increasing it",
                              "type": "exceed_context_size_error", "n_prompt_tokens": 302,
                              "n_ctx": 256}}


def test_timings_formulas():
    t = S.Timings(cache_n=2, prompt_n=4, prompt_ms=8.0, predicted_n=4, predicted_ms=390.316)
    j = t.to_json()
    assert j["prompt_per_token_ms"] == 2.0 and j["prompt_per_second"] == 500.0
    assert j["predicted_per_token_ms"] == pytest.approx(130.105, abs=1e-3)  # first token free
    assert j["predicted_per_second"] == pytest.approx(3000 / 390.316)
    assert "draft_n" not in j


def test_stop_string_search():
    assert find_stop("Track concert", ["conce"], 0) == (6, "conce")
    assert find_stop("abc", ["x"], 0) == (-1, "")
    assert find_stop("a STOP b END", ["END", "STOP"], 0) == (2, "STOP")
    assert partial_stop("hello wor", ["world"]) == 3
    assert partial_stop("hello", ["world"]) == 0
    assert partial_stop("xx<", ["<|im_end|>", "<a"]) == 1


def test_tool_calls_parsed_from_qwen_format():
    text = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
            '\n</tool_call>')
    content, calls = parse_tool_calls(text)
    assert content == "Let me check."
    assert len(calls) == 1 and calls[0]["type"] == "function"
    assert calls[0]["function"]["name"] == "get_weather"
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}
    assert parse_tool_calls("<tool_call>not json</tool_call>") == (
        "<tool_call>not json</tool_call>", [])


def test_tool_call_stream_holds_back_the_block():
    f = ToolCallStream()
    out = "".join(f.push(p) for p in ["Hi", " <to", "ol_call>", '{"name": "f", ',
                                      '"arguments": {}}', "</tool_call>"])
    assert out == "Hi "
    rest, calls = f.finish()
    assert calls[0]["function"] == {"name": "f", "arguments": "{}"} and rest == ""
    g = ToolCallStream()
    assert g.push("a <t") == "a " and g.push("ea") == "<tea"
    assert g.finish() == ("", [])


def test_messages_validation():
    with pytest.raises(S.ServerError, match="'messages' is required"):
        normalize_messages(None)
    with pytest.raises(S.ServerError):
        normalize_messages([{"content": "x"}])
    msgs = normalize_messages([
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]}])
    assert msgs[0]["content"] == "a\nb"
    assert msgs[1]["tool_calls"][0]["function"]["arguments"] == {"x": 1}


def test_native_final_shape():
    f = S.Final(index=0, text="hi", tokens=[1, 2], stop_type="limit", stopping_word="",
                n_prompt=3, n_decoded=2, n_cached=4, timings=S.Timings(), probs=[], id_slot=1)
    d = S.native_final(f, "m", False, S.TaskParams(return_tokens=True))
    assert list(d)[:6] == ["index", "content", "tokens", "id_slot", "stop", "model"]
    assert d["tokens"] == [1, 2] and d["stop_type"] == "limit" and d["tokens_cached"] == 4
    assert S.native_final(f, "m", False, S.TaskParams(), ["content", "timings/prompt_n"]) == {
        "content": "hi", "timings/prompt_n": 0}     # keyed by the path, as json_get_nested_values
    msgspec.json.encode(d)


def test_adaptive_p_fields():
    p = params(b'{"adaptive_target": 3.0, "adaptive_decay": 0.5}')
    assert p.sampling.adaptive_target == 1.0 and p.sampling.adaptive_decay == 0.5
    with pytest.raises(S.ServerError):
        params(b'{"adaptive_decay": 1.5}')


def test_lazy_grammar_fields():
    p = params(b'{"grammar": "root ::= \\"a\\"", "grammar_lazy": true, "grammar_triggers": '
               b'[{"type": 1, "value": "<x>"}, {"type": 0, "value": "t", "token": 5}, '
               b'{"type": 3, "value": "a.*"}]}').sampling
    assert p.grammar_lazy and p.grammar_triggers == (("word", "<x>"), ("token", 5),
                                                     ("pattern_full", "a.*"))
    with pytest.raises(S.ServerError, match="no triggers set for lazy grammar"):
        params(b'{"grammar": "root ::= \\"a\\"", "grammar_lazy": true}')
