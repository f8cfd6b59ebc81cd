// MXFP4 and NVFP4 decode, as src/codecs/fp4.rs defines them: E2M1 values
// (doubled, so they are integers) times a power-of-two or UE4M3 scale
// halved. A thread a value.

// E2M1 values doubled (src/codecs/fp4.rs E2M1_DOUBLED; a test holds the two equal).
__constant__ signed char qf_e2m1_doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 32 E2M1 values and an E8M0 scale a block; a 32-thread group a block.
QF_KERNEL(qf_decode_mxfp4)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    qf_u64 block = (qf_u64)blockIdx.x * 8 + threadIdx.x / 32;
    if (block >= n_blocks) return;
    const qf_u8* b = (const qf_u8*)source + block * 17;
    // Half of 2^(e - 127) (ggml's GGML_E8M0_TO_FP32_HALF).
    qf_u32 e = b[0];
    float d = __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
    int j = threadIdx.x % 32;
    int q = j < 16 ? (b[1 + j] & 0xf) : (b[1 + j - 16] >> 4);
    ((float*)destination)[block * 32 + j] = (float)qf_e2m1_doubled[q] * d;
}

// Half of a UE4M3 scale (ggml's ggml_ue4m3_to_fp32 halved); every step exact.
__device__ __forceinline__ float qf_ue4m3_to_f32_half(qf_u8 x) {
    if (x == 0 || x == 0x7f) return 0.0f;
    int exp = (x >> 3) & 0xf;
    float man = (float)(x & 0x7);
    float raw = exp == 0 ? man * 0.001953125f : (1.0f + man / 8.0f) * __uint_as_float((qf_u32)(exp - 7 + 127) << 23);
    return raw * 0.5f;
}

// 64 E2M1 values and four UE4M3 scales (one per 16) a block; 64 threads a block.
QF_KERNEL(qf_decode_nvfp4)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    qf_u64 block = (qf_u64)blockIdx.x * 4 + threadIdx.x / 64;
    if (block >= n_blocks) return;
    const qf_u8* b = (const qf_u8*)source + block * 36;
    int v = threadIdx.x % 64, s = v / 16, j = v % 16;
    qf_u8 byte = b[4 + 8 * s + j % 8];
    int q = j < 8 ? (byte & 0xf) : (byte >> 4);
    ((float*)destination)[block * 64 + v] = (float)qf_e2m1_doubled[q] * qf_ue4m3_to_f32_half(b[s]);
}
