// The llama_vocab methods DRY's breaker processing and the infill sampler call, over a toy
// vocabulary whose pieces match toy_piece() in tests/sampling/test_sampling_golden.py: ids
// 49, 99, ... are end-of-generation tokens with an empty piece. tokenize is a greedy
// longest-piece match (lowest id for a repeated piece), like pyllama's fallback tokenizer.
#include "llama-vocab.h"
#include <string>
#include <vector>

int g_toy_n_vocab = 0;

std::string toy_piece(int id) {
    static const char * special[] = {"\n", ":", "x:", " *", "\"q", "a", "b", "ab"};
    int r = id % 50;
    if (r < 8) return special[r];
    if (r == 49) return "";
    return "w" + std::to_string(id);
}

uint32_t llama_vocab::n_tokens() const { return (uint32_t) g_toy_n_vocab; }

std::string llama_vocab::detokenize(const std::vector<llama_token> & tokens, bool) const {
    std::string s;
    for (auto t : tokens) s += toy_piece(t);
    return s;
}

std::vector<llama_token> llama_vocab::tokenize(const std::string & text, bool, bool) const {
    std::vector<llama_token> out;
    size_t i = 0;
    while (i < text.size()) {
        int best = -1;
        size_t best_len = 0;
        for (int id = 0; id < g_toy_n_vocab; id++) {
            std::string p = toy_piece(id);
            if (p.size() > best_len && text.compare(i, p.size(), p) == 0) {
                best = id;
                best_len = p.size();
            }
        }
        if (best < 0) { i++; continue; }
        out.push_back(best);
        i += best_len;
    }
    return out;
}

bool llama_vocab::is_eog(llama_token id) const { return id % 50 == 49; }
llama_token llama_vocab::token_eot() const { return 49; }
llama_token llama_vocab::token_eos() const { return 49; }

int32_t llama_vocab::token_to_piece(llama_token id, char * buf, int32_t length, int32_t, bool) const {
    std::string p = toy_piece(id);
    if ((int32_t) p.size() > length) return -(int32_t) p.size();
    p.copy(buf, p.size());
    return (int32_t) p.size();
}
