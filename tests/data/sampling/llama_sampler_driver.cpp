// Runs llama.cpp's sampler chain (common_sampler_init order) over logits from a file.
// usage: driver logits.bin n_vocab steps key=value...  -> stdout: per step "sel n id:p ..."
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

extern int g_toy_n_vocab;  // toy_vocab.cpp

int main(int argc, char ** argv) {
    const char * path = argv[1];
    int n_vocab = atoi(argv[2]), steps = atoi(argv[3]);
    g_toy_n_vocab = n_vocab;
    static const char * breakers[] = {"\n", ":", "\"", "*", "ab"};
    static char fake_vocab[64];  // the toy methods never read the object
    std::map<std::string, std::string> kv;
    for (int i = 4; i < argc; i++) {
        std::string a = argv[i];
        auto eq = a.find('=');
        kv[a.substr(0, eq)] = a.substr(eq + 1);
    }
    auto F = [&](const char * k, double d) { return kv.count(k) ? atof(kv[k].c_str()) : d; };
    auto I = [&](const char * k, long d) { return kv.count(k) ? atol(kv[k].c_str()) : d; };
    uint32_t seed = (uint32_t) I("seed", 1234);
    std::string seq = kv.count("seq") ? kv["seq"] : "edskypmxt";
    int min_keep = I("min_keep", 0);
    llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    if (kv.count("bias_tok")) {
        static llama_logit_bias lb[1];
        lb[0].token = I("bias_tok", 0); lb[0].bias = F("bias", 0);
        llama_sampler_chain_add(chain, llama_sampler_init_logit_bias(n_vocab, 1, lb));
    }
    int miro = I("mirostat", 0);
    float temp = F("temp", 0.8);
    if (miro == 1) {
        llama_sampler_chain_add(chain, llama_sampler_init_temp(temp));
        llama_sampler_chain_add(chain, llama_sampler_init_mirostat(n_vocab, seed, F("tau", 5), F("eta", 0.1), 100));
    } else if (miro == 2) {
        llama_sampler_chain_add(chain, llama_sampler_init_temp(temp));
        llama_sampler_chain_add(chain, llama_sampler_init_mirostat_v2(seed, F("tau", 5), F("eta", 0.1)));
    } else {
        bool adaptive = false;
        for (char c : seq) {
            llama_sampler * s = nullptr;
            if (c == 'a') { adaptive = true; continue; }
            switch (c) {
                case 'e': s = llama_sampler_init_penalties(n_vocab, I("last_n", 64), F("repeat", 1), F("freq", 0), F("present", 0)); break;
                case 'd': s = llama_sampler_init_dry((const llama_vocab *) fake_vocab, F("dry_mult", 0), F("dry_base", 1.75), I("dry_allowed", 2), I("dry_last_n", 64), breakers, I("dry_brk", 0) ? 5 : 0); break;
                case 's': s = llama_sampler_init_top_n_sigma(F("nsigma", -1)); break;
                case 'k': s = llama_sampler_init_top_k(I("top_k", 40)); break;
                case 'y': s = llama_sampler_init_typical(F("typ_p", 1), min_keep); break;
                case 'p': s = llama_sampler_init_top_p(F("top_p", 0.95), min_keep); break;
                case 'm': s = llama_sampler_init_min_p(F("min_p", 0.05), min_keep); break;
                case 'x': s = llama_sampler_init_xtc(F("xtc_p", 0), F("xtc_t", 0.1), min_keep, seed); break;
                case 'i': s = llama_sampler_init_infill((const llama_vocab *) fake_vocab); break;
                case 't': s = llama_sampler_init_temp_ext(temp, F("dyn_range", 0), F("dyn_exp", 1)); break;
            }
            llama_sampler_chain_add(chain, s);
        }
        llama_sampler_chain_add(chain, adaptive
            ? llama_sampler_init_adaptive_p(F("ad_target", -1), F("ad_decay", 0.9), seed)
            : llama_sampler_init_dist(seed));
    }
    std::vector<float> logits((size_t) n_vocab * steps);
    FILE * f = fopen(path, "rb");
    fread(logits.data(), sizeof(float), logits.size(), f);
    fclose(f);
    std::vector<llama_token_data> cur(n_vocab);
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < n_vocab; i++) cur[i] = { i, logits[(size_t) s * n_vocab + i], 0.0f };
        llama_token_data_array arr = { cur.data(), cur.size(), -1, false };
        llama_sampler_apply(chain, &arr);
        llama_token tok = arr.data[arr.selected].id;
        printf("%d %zu", tok, arr.size);
        for (size_t i = 0; i < arr.size; i++) printf(" %d:%.9g", arr.data[i].id, arr.data[i].p);
        printf("\n");
        llama_sampler_accept(chain, tok);
    }
    return 0;
}
