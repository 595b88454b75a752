// llama.cpp 0c1e570's chat parser on whole model outputs: stdin {"template": src, "cases":
// [{"input", "tools" (OpenAI tools), "parallel_tool_calls"}]} -> stdout [{content, tool_calls}]
#include "chat.h"
#include "peg-parser.h"
#include <nlohmann/json.hpp>
#include <iostream>
#include <iterator>
using json = nlohmann::ordered_json;
int main() {
    std::string raw((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    json in = json::parse(raw);
    auto tmpls = common_chat_templates_init(nullptr, in["template"].get<std::string>(), "<s>", "</s>");
    json out = json::array();
    for (auto & c : in["cases"]) {
        common_chat_templates_inputs inputs;
        common_chat_msg user; user.role = "user"; user.content = "hi";
        inputs.messages = {user};
        for (auto & t : c["tools"]) {
            auto & f = t["function"];
            inputs.tools.push_back({f["name"].get<std::string>(), f.value("description", std::string()),
                                    f["parameters"].dump()});
        }
        inputs.parallel_tool_calls = c["parallel_tool_calls"].get<bool>();
        inputs.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
        auto params = common_chat_templates_apply(tmpls.get(), inputs);
        common_peg_arena arena;
        arena.load(params.parser);
        common_chat_parser_params pp(params);
        pp.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
        json r;
        try {
            auto msg = common_chat_peg_parse(arena, c["input"].get<std::string>(), false, pp);
            json calls = json::array();
            for (auto & t : msg.tool_calls) calls.push_back({{"name", t.name}, {"arguments", t.arguments}});
            r = {{"content", msg.content}, {"reasoning_content", msg.reasoning_content}, {"tool_calls", calls}};
        } catch (const std::exception & e) {
            r = {{"error", e.what()}};
        }
        r["format"] = common_chat_format_name(params.format);
        out.push_back(r);
    }
    std::cout << out.dump(1) << std::endl;
}
