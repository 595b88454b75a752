// The three llama_vocab methods DRY's breaker processing calls, over a toy vocabulary whose
// pieces match toy_piece() in tests/sampling/test_sampling_golden.py. tokenize is a greedy
// longest-piece match (lowest id for a repeated piece), like pyllama's fallback tokenizer.
#include "llama-vocab.h"
#include <string>
#include <vector>

int g_toy_n_vocab = 0;

std::string toy_piece(int id) {
    static const char * special[] = {"\n", ":", "x:", " *", "\"q", "a", "b", "ab"};
    int r = id % 50;
    if (r < 8) return special[r];
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
