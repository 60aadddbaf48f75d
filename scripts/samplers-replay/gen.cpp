// Generates with llama.cpp's model and its sampler chain (llama-server's
// default order), writing every step's logits and choice, for Hearth's
// sampler to replay (scripts/samplers-replay.sh). Usage: gen MODEL CASES.json OUT_DIR
#include "llama.h"
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include <cmath>
#include "nlohmann/json.hpp"
using json = nlohmann::json;

int main(int argc, char ** argv) {
    llama_backend_init();
    auto mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);
    std::ifstream in(argv[2]); json cases = json::parse(in);
    std::string dir = argv[3];
    FILE * bin = fopen((dir + "/logits.bin").c_str(), "wb");
    json out = json::array();
    for (auto & c : cases) {
        auto cp = llama_context_default_params();
        cp.n_ctx = 2048; cp.n_batch = 2048; cp.n_threads = 2; cp.n_threads_batch = 2;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32;
        llama_context * ctx = llama_init_from_model(model, cp);
        std::string prompt = c["prompt"];
        std::vector<llama_token> toks(prompt.size() + 8);
        int n = llama_tokenize(vocab, prompt.c_str(), prompt.size(), toks.data(), toks.size(), true, true);
        toks.resize(n);
        json p = c["params"];
        auto sp = llama_sampler_chain_default_params();
        llama_sampler * chain = llama_sampler_chain_init(sp);
        llama_sampler_chain_add(chain, llama_sampler_init_penalties(n_vocab, 64, 1.0f, 0.0f, 0.0f));
        std::vector<std::string> br = p.value("dry_sequence_breakers", std::vector<std::string>{"\n", ":", "\"", "*"});
        std::vector<const char *> brc; for (auto & s : br) brc.push_back(s.c_str());
        llama_sampler_chain_add(chain, llama_sampler_init_dry(vocab, p.value("dry_multiplier", 0.0f), p.value("dry_base", 1.75f),
            p.value("dry_allowed_length", 2), p.value("dry_penalty_last_n", 64), brc.data(), brc.size()));
        llama_sampler_chain_add(chain, llama_sampler_init_top_n_sigma(p.value("top_n_sigma", -1.0f)));
        llama_sampler_chain_add(chain, llama_sampler_init_top_k(40));
        llama_sampler_chain_add(chain, llama_sampler_init_typical(1.0f, 0));
        llama_sampler_chain_add(chain, llama_sampler_init_top_p(0.95f, 0));
        llama_sampler_chain_add(chain, llama_sampler_init_min_p(0.05f, 0));
        llama_sampler_chain_add(chain, llama_sampler_init_xtc(p.value("xtc_probability", 0.0f), p.value("xtc_threshold", 0.1f), 0, 1));
        llama_sampler_chain_add(chain, llama_sampler_init_temp_ext(0.0f, 0.0f, 1.0f));
        llama_sampler_chain_add(chain, llama_sampler_init_dist(1));
        for (auto t : toks) llama_sampler_accept(chain, t);
        llama_batch b = llama_batch_get_one(toks.data(), toks.size());
        std::vector<llama_token> chosen;
        std::vector<llama_token_data> cur(n_vocab);
        llama_token last = 0;
        for (int step = 0; step < c["steps"].get<int>(); ++step) {
            if (llama_decode(ctx, b)) { fprintf(stderr, "decode failed\n"); return 1; }
            float * logits = llama_get_logits_ith(ctx, -1);
            fwrite(logits, sizeof(float), n_vocab, bin);
            for (int i = 0; i < n_vocab; ++i) cur[i] = {i, logits[i], 0.0f};
            llama_token_data_array arr = {cur.data(), cur.size(), -1, false};
            llama_sampler_apply(chain, &arr);
            llama_token id = arr.data[arr.selected].id;
            llama_sampler_accept(chain, id);
            chosen.push_back(id);
            last = id;
            b = llama_batch_get_one(&last, 1);
        }
        out.push_back({{"prompt", prompt}, {"setting", c["setting"]}, {"params", p}, {"prompt_ids", toks}, {"chosen", chosen}});
        llama_sampler_free(chain);
        llama_free(ctx);
    }
    fclose(bin);
    std::ofstream o(dir + "/cases.json"); o << out.dump(1);
    json meta = {{"n_vocab", n_vocab}}; std::ofstream m(dir + "/meta.json"); m << meta.dump();
    return 0;
}
