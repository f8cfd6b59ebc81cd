// Loads GGUF files with llama.cpp's own loader (hyperparameters, vocabulary and
// every create_tensor shape check) without computing anything, and prints one
// JSON line per file: what llama.cpp read, or the error it stopped with.
//
// Build and run through tests/arch/verify_llama.py, which compiles this against
// the reference build ($QUANTFORGE_REFS/llama.cpp/build/bin/libllama.so).

#include "llama.h"

#include <cstdio>
#include <string>

static std::string g_log;

static void on_log(enum ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) {
        g_log += text;
    }
}

static std::string json_escape(const std::string & s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '"':  out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n";  break;
            case '\t': out += "\\t";  break;
            default:
                if ((unsigned char) c < 0x20) {
                    char buf[8];
                    snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += c;
                }
        }
    }
    return out;
}

int main(int argc, char ** argv) {
    llama_log_set(on_log, nullptr);
    llama_backend_init();
    for (int i = 1; i < argc; ++i) {
        g_log.clear();
        llama_model_params params = llama_model_default_params();
        params.n_gpu_layers = 0;
        params.use_extra_bufts = false; // plain CPU buffers: the fixtures are tiny
        llama_model * model = llama_model_load_from_file(argv[i], params);
        if (model == nullptr) {
            printf("{\"file\": \"%s\", \"ok\": false, \"log\": \"%s\"}\n", json_escape(argv[i]).c_str(),
                   json_escape(g_log).c_str());
            fflush(stdout);
            continue;
        }
        char desc[256];
        llama_model_desc(model, desc, sizeof desc);
        const llama_vocab * vocab = llama_model_get_vocab(model);
        printf("{\"file\": \"%s\", \"ok\": true, \"desc\": \"%s\", \"n_embd\": %d, \"n_layer\": %d, "
               "\"n_head\": %d, \"n_head_kv\": %d, \"n_ctx_train\": %d, \"n_vocab\": %d, \"n_swa\": %d, "
               "\"n_params\": %llu}\n",
               json_escape(argv[i]).c_str(), json_escape(desc).c_str(), llama_model_n_embd(model),
               llama_model_n_layer(model), llama_model_n_head(model), llama_model_n_head_kv(model),
               llama_model_n_ctx_train(model), llama_vocab_n_tokens(vocab), llama_model_n_swa(model),
               (unsigned long long) llama_model_n_params(model));
        fflush(stdout);
        llama_model_free(model);
    }
    llama_backend_free();
    return 0;
}
