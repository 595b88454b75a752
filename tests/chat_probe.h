// What tests/chat_parse_probe.cpp and tests/chat_params_probe.cpp share (fixture recorders
// compiled against llama.cpp 0c1e570's common library): the stdin document, one case's chat inputs
// (one user message "hi" and the case's OpenAI tools), and one parse of a model output.
#pragma once
#include "chat.h"
#include "peg-parser.h"
#include <nlohmann/json.hpp>
#include <iostream>
#include <iterator>
using json = nlohmann::ordered_json;

static json probe_read_stdin() {
    std::string raw((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    return json::parse(raw);
}

static common_chat_templates_inputs probe_inputs(const json & c) {
    common_chat_templates_inputs inputs;
    common_chat_msg user; user.role = "user"; user.content = "hi";
    inputs.messages = {user};
    for (auto & t : c["tools"]) {
        auto & f = t["function"];
        inputs.tools.push_back({f["name"].get<std::string>(), f.value("description", std::string()),
                                f["parameters"].dump()});
    }
    return inputs;
}

// {content, reasoning_content, tool_calls: [{name, arguments}]} or {error}
static json probe_parse(const common_peg_arena & arena, const common_chat_parser_params & pp,
                        const std::string & text, bool partial) {
    try {
        auto msg = common_chat_peg_parse(arena, text, partial, pp);
        json calls = json::array();
        for (auto & t : msg.tool_calls) calls.push_back({{"name", t.name}, {"arguments", t.arguments}});
        return {{"content", msg.content}, {"reasoning_content", msg.reasoning_content}, {"tool_calls", calls}};
    } catch (const std::exception & e) {
        return {{"error", e.what()}};
    }
}
