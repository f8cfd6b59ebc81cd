// llama.cpp's own tensor-parallel split plan for a model, as quantforge's
// goldens record it: for each weight, what `llama_meta_device_get_split_state`
// returns for N devices (and optional tensor_split weights).
//
//   split_ref MODEL.gguf N_DEVICES [W1,W2,...]
//
// Prints one JSON object: {"tensors": [{"name", "axis", "ne": [...], "nr": [...]}, ...]}
// with `ne` holding n_segments * N extents (segment-major) and `nr` the
// repeat count of each segment; axis is 0..3, "mirrored" or "partial".
// Built against the fetched llama.cpp sources (internal headers) by gen.sh;
// never part of quantforge itself.

#include "llama.h"
#include "llama-arch.h"
#include "llama-model.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

static void quiet(ggml_log_level, const char *, void *) {}

int main(int argc, char ** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL.gguf N_DEVICES [W1,W2,...]\n", argv[0]);
        return 2;
    }
    const size_t n_devices = std::strtoul(argv[2], nullptr, 10);
    std::vector<float> split(llama_max_devices(), 0.0f);
    bool weighted = false;
    if (argc > 3) {
        std::stringstream weights(argv[3]);
        std::string w;
        size_t i = 0;
        while (std::getline(weights, w, ',') && i < split.size()) {
            split[i++] = std::strtof(w.c_str(), nullptr);
        }
        weighted = true;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params params = llama_model_default_params();
    params.n_gpu_layers = 0;
    if (weighted) {
        params.tensor_split = split.data();
    }
    llama_model * model = llama_model_load_from_file(argv[1], params);
    if (model == nullptr) {
        std::printf("{\"error\": \"load\"}\n");
        return 1;
    }
    if (!llm_arch_supports_sm_tensor(model->arch)) {
        // What llama_model_create throws for LLAMA_SPLIT_MODE_TENSOR.
        std::printf("{\"error\": \"unsupported\"}\n");
        return 1;
    }
    llama_meta_device_get_split_state_userdata ud = { n_devices, model };
    std::printf("{\"tensors\": [");
    bool first = true;
    for (const auto & [name, tensor] : model->tensors_by_name) {
        const ggml_backend_meta_split_state s = llama_meta_device_get_split_state(tensor, &ud);
        std::printf("%s\n  {\"name\": \"%s\", \"axis\": ", first ? "" : ",", name.c_str());
        first = false;
        if (s.axis == GGML_BACKEND_SPLIT_AXIS_MIRRORED) {
            std::printf("\"mirrored\"");
        } else if (s.axis == GGML_BACKEND_SPLIT_AXIS_PARTIAL) {
            std::printf("\"partial\"");
        } else {
            std::printf("%d", (int) s.axis);
        }
        std::printf(", \"ne\": [");
        const size_t n_ne = (s.axis == GGML_BACKEND_SPLIT_AXIS_MIRRORED) ? 0
                          : (s.axis == GGML_BACKEND_SPLIT_AXIS_PARTIAL) ? n_devices
                          : s.n_segments * n_devices;
        for (size_t i = 0; i < n_ne; i++) {
            std::printf("%s%lld", i ? ", " : "", (long long) s.ne[i]);
        }
        std::printf("], \"nr\": [");
        for (size_t i = 0; i < s.n_segments; i++) {
            std::printf("%s%u", i ? ", " : "", s.nr[i]);
        }
        std::printf("]}");
    }
    std::printf("\n]}\n");
    llama_model_free(model);
    return 0;
}
