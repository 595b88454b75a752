// llama.cpp 0c1e570's chat parameters for one template: stdin {"template": src, "cases": [{"tools"
// (OpenAI tools), "tool_choice" ("auto" | "required" | "none"), "parallel_tool_calls",
// "outputs" (model outputs to parse, whole and partial), "matches" (model outputs to run
// through the grammar)}]} -> stdout [{format, generation_prompt, grammar, grammar_lazy,
// grammar_triggers, preserved_tokens, parses: [{content, reasoning_content, tool_calls} |
// {error}], partial_parses: [...], matches: [bool]}]. A grammar match feeds the generation
// prompt, then the output, one code point at a time (llama.cpp's grammar integration test's
// match_string; the server prefills the generation prompt the same way). A lazy grammar is
// matched from its trigger on: the output alone.
#include "chat_probe.h"
#include "../src/llama-grammar.h"
#include "../src/unicode.h"

static bool grammar_matches(const std::string & grammar_text, const std::string & input) {
    llama_grammar * g = llama_grammar_init_impl(nullptr, grammar_text.c_str(), "root", false,
                                                nullptr, 0, nullptr, 0);
    if (!g) return false;
    bool ok = true;
    size_t off = 0;
    auto & stacks = llama_grammar_get_stacks(g);
    while (off < input.size() && ok) {
        uint32_t cpt = unicode_cpt_from_utf8(input, off);
        try {
            llama_grammar_accept_token(*g, 0, unicode_cpt_to_utf8(cpt));
        } catch (const std::runtime_error &) {
            ok = false;
        }
        if (stacks.empty()) ok = false;
    }
    if (ok) {
        ok = false;
        for (const auto & s : stacks) if (s.empty()) ok = true;
    }
    llama_grammar_free_impl(g);
    return ok;
}

int main() {
    json in = probe_read_stdin();
    auto tmpls = common_chat_templates_init(nullptr, in["template"].get<std::string>(), "<s>", "</s>");
    json out = json::array();
    for (auto & c : in["cases"]) {
        common_chat_templates_inputs inputs = probe_inputs(c);
        inputs.tool_choice = common_chat_tool_choice_parse_oaicompat(c.value("tool_choice", std::string("auto")));
        inputs.parallel_tool_calls = c.value("parallel_tool_calls", false);
        auto params = common_chat_templates_apply(tmpls.get(), inputs);
        common_peg_arena arena;
        arena.load(params.parser);
        common_chat_parser_params pp(params);
        json triggers = json::array();
        for (auto & t : params.grammar_triggers) triggers.push_back({{"type", (int) t.type}, {"value", t.value}});
        json r = {{"format", common_chat_format_name(params.format)},
                  {"generation_prompt", params.generation_prompt},
                  {"grammar", params.grammar}, {"grammar_lazy", params.grammar_lazy},
                  {"grammar_triggers", triggers}, {"preserved_tokens", params.preserved_tokens}};
        json parses = json::array(), partial = json::array(), matches = json::array();
        for (auto & o : c.value("outputs", json::array())) {
            parses.push_back(probe_parse(arena, pp, o.get<std::string>(), false));
            partial.push_back(probe_parse(arena, pp, o.get<std::string>(), true));
        }
        for (auto & m : c.value("matches", json::array())) {
            // a lazy grammar starts at its trigger, without the generation prompt
            const std::string prefix = params.grammar_lazy ? "" : params.generation_prompt;
            matches.push_back(!params.grammar.empty() &&
                              grammar_matches(params.grammar, prefix + m.get<std::string>()));
        }
        r["parses"] = parses;
        r["partial_parses"] = partial;
        r["matches"] = matches;
        out.push_back(r);
    }
    std::cout << out.dump(1) << std::endl;
}
