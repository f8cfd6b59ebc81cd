// The IQ grid types' decoders (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ1_S, IQ1_M), as src/codecs/iq_grid.rs defines them: each 8 values a
// lattice point from a table (iq_grids.cuh, written at build time from the
// codecs' tables), signs, and a group scale. A block of 256 threads a
// super-block: thread t decodes value t, the j-th of point l of group g.

// ggml's signed point: scale · grid value · (±1). The sign stays a
// multiplication, as in the codecs (a negation would flip NaNs' sign bits).
__device__ __forceinline__ float qf_signed_point(float scale, qf_u64 grid, qf_u8 signs, int j) {
    return scale * (float)(qf_u8)(grid >> (8 * j)) * ((signs & qf_kmask_iq2xs[j]) ? -1.0f : 1.0f);
}

// Two 4-value IQ3 points side by side, as one 8-value point.
__device__ __forceinline__ qf_u64 qf_pair(qf_u32 first, qf_u32 second) {
    return (qf_u64)first | ((qf_u64)second << 32);
}

// ggml's IQ1 point: scale · (grid value + delta), grid values signed.
__device__ __forceinline__ float qf_shifted_point(float scale, qf_u64 grid, float delta, int j) {
    return scale * ((float)(signed char)(qf_u8)(grid >> (8 * j)) + delta);
}

__device__ __forceinline__ qf_u32 qf_load_u32(const qf_u8* p) {
    return (qf_u32)p[0] | ((qf_u32)p[1] << 8) | ((qf_u32)p[2] << 16) | ((qf_u32)p[3] << 24);
}

#define QF_GRID_THREAD                      \
    qf_u64 block = blockIdx.x;              \
    if (block >= n_blocks) return;          \
    int t = threadIdx.x, g = t / 32, l = (t % 32) / 8, j = t % 8; \
    float* y = (float*)destination + block * QK_K + t

QF_KERNEL(qf_decode_iq2_xxs)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    QF_GRID_THREAD;
    const qf_u8* b = (const qf_u8*)source + block * 66;
    const qf_u8* q = b + 2 + 8 * g;
    qf_u32 aux = qf_load_u32(q + 4);
    float db = qf_f16_to_f32(qf_load_u16(b)) * (0.5f + (float)(aux >> 28)) * 0.25f;
    *y = qf_signed_point(db, qf_iq2xxs_grid[q[l]], qf_ksigns_iq2xs[(aux >> (7 * l)) & 127], j);
}

QF_KERNEL(qf_decode_iq2_xs)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    QF_GRID_THREAD;
    const qf_u8* b = (const qf_u8*)source + block * 74;
    qf_u8 sc = b[66 + g];
    float db = qf_f16_to_f32(qf_load_u16(b)) * (0.5f + (float)(l < 2 ? sc & 0xf : sc >> 4)) * 0.25f;
    qf_u16 q = qf_load_u16(b + 2 + 8 * g + 2 * l);
    *y = qf_signed_point(db, qf_iq2xs_grid[q & 511], qf_ksigns_iq2xs[q >> 9], j);
}

QF_KERNEL(qf_decode_iq2_s)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    QF_GRID_THREAD;
    const qf_u8* b = (const qf_u8*)source + block * 82;
    qf_u8 qh = b[66 + g], sc = b[74 + g];
    float db = qf_f16_to_f32(qf_load_u16(b)) * (0.5f + (float)(l < 2 ? sc & 0xf : sc >> 4)) * 0.25f;
    int index = b[2 + 4 * g + l] | (((int)qh << (8 - 2 * l)) & 0x300);
    *y = qf_signed_point(db, qf_iq2s_grid[index], b[34 + 4 * g + l], j);
}

QF_KERNEL(qf_decode_iq3_xxs)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    QF_GRID_THREAD;
    const qf_u8* b = (const qf_u8*)source + block * 98;
    const qf_u8* qs = b + 2 + 8 * g;
    qf_u32 aux = qf_load_u32(b + 66 + 4 * g);
    float db = qf_f16_to_f32(qf_load_u16(b)) * (0.5f + (float)(aux >> 28)) * 0.5f;
    qf_u64 grid = qf_pair(qf_iq3xxs_grid[qs[2 * l]], qf_iq3xxs_grid[qs[2 * l + 1]]);
    *y = qf_signed_point(db, grid, qf_ksigns_iq2xs[(aux >> (7 * l)) & 127], j);
}

QF_KERNEL(qf_decode_iq3_s)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    QF_GRID_THREAD;
    const qf_u8* b = (const qf_u8*)source + block * 110;
    const qf_u8* qs = b + 2 + 8 * g;
    int qh = b[66 + g];
    int sc = (b[106 + g / 2] >> (4 * (g % 2))) & 0xf;
    float db = qf_f16_to_f32(qf_load_u16(b)) * (float)(1 + 2 * sc);
    int first = qs[2 * l] | ((qh << (8 - 2 * l)) & 256);
    int second = qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
    *y = qf_signed_point(db, qf_pair(qf_iq3s_grid[first], qf_iq3s_grid[second]), b[74 + 4 * g + l], j);
}

QF_KERNEL(qf_decode_iq1_s)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    QF_GRID_THREAD;
    const qf_u8* b = (const qf_u8*)source + block * 50;
    int qh = qf_load_u16(b + 34 + 2 * g);
    float dl = qf_f16_to_f32(qf_load_u16(b)) * (float)(2 * ((qh >> 12) & 7) + 1);
    float delta = (qh & 0x8000) ? -QF_IQ1S_DELTA : QF_IQ1S_DELTA;
    int index = b[2 + 4 * g + l] | (((qh >> (3 * l)) & 7) << 8);
    *y = qf_shifted_point(dl, qf_iq1s_grid[index], delta, j);
}

// IQ1_M: no scale field; the f16 scale is the top nibbles of the four
// 16-bit group-scale words.
QF_KERNEL(qf_decode_iq1_m)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    QF_GRID_THREAD;
    const qf_u8* b = (const qf_u8*)source + block * 56;
    const qf_u8* scales = b + 48;
    qf_u16 sc[4];
    for (int i = 0; i < 4; i++) sc[i] = qf_load_u16(scales + 2 * i);
    qf_u16 d_bits = (qf_u16)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    int shift = 6 * (g % 2) + 3 * (l / 2);
    float dl = qf_f16_to_f32(d_bits) * (float)(2 * ((sc[g / 2] >> shift) & 0x7) + 1);
    int h = b[32 + 2 * g + l / 2];
    int index_shift = l % 2 == 0 ? 8 : 4, delta_bit = l % 2 == 0 ? 0x08 : 0x80;
    int index = b[4 * g + l] | ((h << index_shift) & 0x700);
    float delta = (h & delta_bit) ? -QF_IQ1S_DELTA : QF_IQ1S_DELTA;
    *y = qf_shifted_point(dl, qf_iq1s_grid[index], delta, j);
}
