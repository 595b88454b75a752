// llama.cpp 0c1e570's chat parser on whole model outputs: stdin {"template": src, "cases":
// [{"input", "tools" (OpenAI tools), "parallel_tool_calls"}]} -> stdout [{content, tool_calls}]
#include "chat_probe.h"
int main() {
    json in = probe_read_stdin();
    auto tmpls = common_chat_templates_init(nullptr, in["template"].get<std::string>(), "<s>", "</s>");
    json out = json::array();
    for (auto & c : in["cases"]) {
        common_chat_templates_inputs inputs = probe_inputs(c);
        inputs.parallel_tool_calls = c["parallel_tool_calls"].get<bool>();
        inputs.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
        auto params = common_chat_templates_apply(tmpls.get(), inputs);
        common_peg_arena arena;
        arena.load(params.parser);
        common_chat_parser_params pp(params);
        pp.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
        json r = probe_parse(arena, pp, c["input"].get<std::string>(), false);
        r["format"] = common_chat_format_name(params.format);
        out.push_back(r);
    }
    std::cout << out.dump(1) << std::endl;
}
