// Loads a language model and an mmproj file together the way llama.cpp's
// multimodal tools do (llama_model_load_from_file + mtmd_init_from_file with a
// warmup encode) and prints one line: "OK ..." or "... FAIL" with the log.
//
// Built and run by tests/arch/verify_llama.py --mtmd.

#include "llama.h"
#include "mtmd.h"
#include <cstdio>
#include <string>
static std::string g_log;
static void on_log(enum ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_WARN) g_log += text;
}
int main(int argc, char ** argv) {
    // argv: LM MMPROJ
    if (argc != 3) { fprintf(stderr, "usage: mtmd_pair LM MMPROJ\n"); return 2; }
    llama_log_set(on_log, nullptr);
    mtmd_log_set(on_log, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { printf("LM FAIL %s\n%s\n", argv[1], g_log.c_str()); return 1; }
    mtmd_context_params cp = mtmd_context_params_default();
    cp.use_gpu = false;
    cp.warmup = true;
    cp.n_threads = 1;
    mtmd_context * ctx = mtmd_init_from_file(argv[2], model, cp);
    if (!ctx) { printf("MTMD FAIL %s + %s\n%s\n", argv[1], argv[2], g_log.c_str()); return 1; }
    printf("OK %s + %s vision=%d audio=%d\n", argv[1], argv[2], mtmd_support_vision(ctx), mtmd_support_audio(ctx));
    mtmd_free(ctx);
    llama_model_free(model);
    return 0;
}
