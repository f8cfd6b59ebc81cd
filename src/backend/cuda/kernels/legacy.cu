// The 32-element block types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0: encode from
// f32, with importance weights (ggml's quantize_row_*_impl) or without
// (its reference rows), as src/codecs/legacy.rs defines them, and decode
// to f32 (Q8_1 too).
//
// Each 32-thread group of a block owns one ggml block, a thread one value:
// the group finds its block's extremes by a tree reduction in shared memory
// (ties to the earliest value, as the sequential scan), then every thread
// rounds its own value and the first threads pack the bytes.

#define QF_GROUPS (QF_THREADS / QK)

struct QfGroup {
    int lane;
    int first; // the group's first thread in the block
    qf_u64 block;
    bool active;
};

__device__ __forceinline__ QfGroup qf_group(qf_u64 n_blocks) {
    QfGroup g;
    g.lane = threadIdx.x % QK;
    g.first = threadIdx.x - g.lane;
    g.block = (qf_u64)blockIdx.x * QF_GROUPS + threadIdx.x / QK;
    g.active = g.block < n_blocks;
    return g;
}

// The value of largest magnitude in each group (the first of equals; 0 when
// all are zero), for every thread of the group.
__device__ float qf_group_signed_absmax(float v, QfGroup g, float* magnitude, float* value, int* index) {
    magnitude[threadIdx.x] = fabsf(v);
    value[threadIdx.x] = v;
    index[threadIdx.x] = g.lane;
    __syncthreads();
    for (int stride = QK / 2; stride > 0; stride /= 2) {
        if (g.lane < stride) {
            int i = threadIdx.x, o = threadIdx.x + stride;
            if (qf_wins(magnitude[i], index[i], magnitude[o], index[o])) {
                magnitude[i] = magnitude[o];
                value[i] = value[o];
                index[i] = index[o];
            }
        }
        __syncthreads();
    }
    float result = magnitude[g.first] > 0.0f ? value[g.first] : 0.0f;
    __syncthreads();
    return result;
}

// Each group's minimum and maximum (the first of equals, so a -0 or +0
// minimum keeps the sign the scan would).
__device__ void qf_min_max(float v, QfGroup g, float* lo, float* hi, int* lo_index, int* hi_index, float* min,
                           float* max) {
    lo[threadIdx.x] = v;
    hi[threadIdx.x] = v;
    lo_index[threadIdx.x] = g.lane;
    hi_index[threadIdx.x] = g.lane;
    __syncthreads();
    for (int stride = QK / 2; stride > 0; stride /= 2) {
        if (g.lane < stride) {
            int i = threadIdx.x, o = threadIdx.x + stride;
            if (qf_wins(-lo[i], lo_index[i], -lo[o], lo_index[o])) {
                lo[i] = lo[o];
                lo_index[i] = lo_index[o];
            }
            if (qf_wins(hi[i], hi_index[i], hi[o], hi_index[o])) {
                hi[i] = hi[o];
                hi_index[i] = hi_index[o];
            }
        }
        __syncthreads();
    }
    *min = lo[g.first];
    *max = hi[g.first];
    __syncthreads();
}

// min(limit, (int8_t)x) as a byte: ggml's MIN on the x86 cast.
__device__ __forceinline__ qf_u8 qf_clamp_high(float x, int limit) {
    int level = (int)(signed char)qf_float_to_int(x);
    return (qf_u8)(level < limit ? level : limit);
}

// Levels l[j] | l[j + 16] << 4, unmasked (Q4_0, Q4_1) or masked (Q5).
__device__ void qf_pack_nibbles(const qf_u8* levels, QfGroup g, qf_u8* qs, bool masked) {
    if (g.lane < QK / 2) {
        qf_u8 low = levels[threadIdx.x], high = levels[threadIdx.x + QK / 2];
        if (masked) {
            low &= 0xf;
            high &= 0xf;
        }
        qs[g.lane] = (qf_u8)(low | (qf_u8)(high << 4));
    }
}

__device__ void qf_pack_high_bits(const qf_u8* levels, QfGroup g, qf_u8* qh) {
    if (g.lane == 0) {
        qf_u32 bits = 0;
        for (int j = 0; j < QK; j++) bits |= (qf_u32)((levels[g.first + j] & 0x10) >> 4) << j;
        for (int k = 0; k < 4; k++) qh[k] = (qf_u8)(bits >> (8 * k));
    }
}

QF_KERNEL(qf_encode_q8_0)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    __shared__ float magnitude[QF_THREADS];
    QfGroup g = qf_group(n_blocks);
    float v = g.active ? ((const float*)source)[g.block * QK + g.lane] : 0.0f;
    magnitude[threadIdx.x] = fabsf(v);
    __syncthreads();
    for (int stride = QK / 2; stride > 0; stride /= 2) {
        if (g.lane < stride) {
            float m = magnitude[threadIdx.x], o = magnitude[threadIdx.x + stride];
            magnitude[threadIdx.x] = m > o ? m : o;
        }
        __syncthreads();
    }
    float d = magnitude[g.first] / 127.0f;
    float id = qf_inverse(d);
    if (g.active) {
        qf_u8* out = (qf_u8*)destination + g.block * 34;
        if (g.lane == 0) qf_store_u16(out, qf_f32_to_f16(d));
        out[2 + g.lane] = (qf_u8)(signed char)qf_float_to_int(roundf(v * id));
    }
}

// With importance weights, each value's weight: qw · sqrt(σ² + x²), σ² the
// mean square of the value's whole row (ggml's quantize_row_*_impl).
__device__ void qf_row_weights(const float* source, float v, QfGroup g, const float* importance, qf_u64 n_per_row,
                               float* x, float* w) {
    __shared__ float sigma2[QF_GROUPS];
    qf_u64 at = g.block * QK + g.lane;
    if (g.lane == 0 && g.active) {
        qf_u64 row = at / n_per_row;
        float s = 0.0f;
        for (qf_u64 i = row * n_per_row; i < (row + 1) * n_per_row; i++) s = s + source[i] * source[i];
        sigma2[threadIdx.x / QK] = s / (float)n_per_row;
    }
    __syncthreads();
    x[threadIdx.x] = v;
    w[threadIdx.x] = g.active ? importance[at % n_per_row] * sqrtf(sigma2[threadIdx.x / QK] + v * v) : 0.0f;
    __syncthreads();
}

// Q4_0 (nmax 8) and Q5_0 (nmax 16): the largest magnitude maps to -nmax,
// or with importance weights the scale make_qx_quants finds.
__device__ void qf_encode_symmetric(const void* source, void* destination, qf_u64 n_blocks, int nmax,
                                    const float* importance, qf_u64 n_per_row) {
    __shared__ float magnitude[QF_THREADS], value[QF_THREADS], x[QF_THREADS], w[QF_THREADS], scales[QF_GROUPS];
    __shared__ int index[QF_THREADS];
    __shared__ qf_u8 levels[QF_THREADS];
    QfGroup g = qf_group(n_blocks);
    float v = g.active ? ((const float*)source)[g.block * QK + g.lane] : 0.0f;
    float d;
    if (importance) {
        qf_row_weights((const float*)source, v, g, importance, n_per_row, x, w);
        if (g.lane == 0) {
            scales[threadIdx.x / QK] = qf_make_qx<QK, 1>(x + g.first, w + g.first, nmax, (signed char*)levels + g.first);
        }
        __syncthreads();
        d = scales[threadIdx.x / QK];
    } else {
        d = qf_group_signed_absmax(v, g, magnitude, value, index) / -(float)nmax;
        float id = qf_inverse(d);
        levels[threadIdx.x] = qf_clamp_high(v * id + ((float)nmax + 0.5f), 2 * nmax - 1);
        __syncthreads();
    }
    if (!g.active) return;
    qf_u8* out = (qf_u8*)destination + g.block * (nmax == 8 ? 18 : 22);
    if (g.lane == 0) qf_store_u16(out, qf_f32_to_f16(d));
    if (nmax == 8) {
        qf_pack_nibbles(levels, g, out + 2, false);
    } else {
        qf_pack_high_bits(levels, g, out + 2);
        qf_pack_nibbles(levels, g, out + 6, true);
    }
}

QF_KERNEL(qf_encode_q4_0)(const void* source, void* destination, qf_u64 n_blocks, const float* importance,
                          qf_u64 n_per_row) {
    qf_encode_symmetric(source, destination, n_blocks, 8, importance, n_per_row);
}

QF_KERNEL(qf_encode_q5_0)(const void* source, void* destination, qf_u64 n_blocks, const float* importance,
                          qf_u64 n_per_row) {
    qf_encode_symmetric(source, destination, n_blocks, 16, importance, n_per_row);
}

// Q4_1 (nmax 15) and Q5_1 (nmax 31): minimum to maximum in nmax steps, or
// with importance weights make_qkx3_quants' search.
__device__ void qf_encode_offset(const void* source, void* destination, qf_u64 n_blocks, int nmax,
                                 const float* importance, qf_u64 n_per_row) {
    __shared__ float lo[QF_THREADS], hi[QF_THREADS], x[QF_THREADS], w[QF_THREADS];
    __shared__ float scales[QF_GROUPS], neg_mins[QF_GROUPS];
    __shared__ int lo_index[QF_THREADS], hi_index[QF_THREADS];
    __shared__ qf_u8 levels[QF_THREADS];
    QfGroup g = qf_group(n_blocks);
    float v = g.active ? ((const float*)source)[g.block * QK + g.lane] : 0.0f;
    float d, min;
    if (importance) {
        qf_row_weights((const float*)source, v, g, importance, n_per_row, x, w);
        if (g.lane == 0) {
            int k = threadIdx.x / QK;
            qf_make_qkx<QK, 1>(x + g.first, w + g.first, nmax, -0.9f, 0.05f, 36, false, true, levels + g.first,
                        &scales[k], &neg_mins[k]);
        }
        __syncthreads();
        d = scales[threadIdx.x / QK];
        min = -neg_mins[threadIdx.x / QK];
    } else {
        float max;
        qf_min_max(v, g, lo, hi, lo_index, hi_index, &min, &max);
        d = (max - min) / (float)nmax;
        float id = qf_inverse(d);
        float level = (v - min) * id + 0.5f;
        // Q4_1 clamps as ggml's MIN does; Q5_1's reference casts with no clamp.
        levels[threadIdx.x] = nmax == 15 ? qf_clamp_high(level, 15) : (qf_u8)qf_float_to_int(level);
        __syncthreads();
    }
    if (!g.active) return;
    qf_u8* out = (qf_u8*)destination + g.block * (nmax == 15 ? 20 : 24);
    if (g.lane == 0) {
        qf_store_u16(out, qf_f32_to_f16(d));
        qf_store_u16(out + 2, qf_f32_to_f16(min));
    }
    if (nmax == 15) {
        qf_pack_nibbles(levels, g, out + 4, false);
    } else {
        qf_pack_high_bits(levels, g, out + 4);
        qf_pack_nibbles(levels, g, out + 8, true);
    }
}

QF_KERNEL(qf_encode_q4_1)(const void* source, void* destination, qf_u64 n_blocks, const float* importance,
                          qf_u64 n_per_row) {
    qf_encode_offset(source, destination, n_blocks, 15, importance, n_per_row);
}

QF_KERNEL(qf_encode_q5_1)(const void* source, void* destination, qf_u64 n_blocks, const float* importance,
                          qf_u64 n_per_row) {
    qf_encode_offset(source, destination, n_blocks, 31, importance, n_per_row);
}

// The 4 low bits of element j of a block's nibbles (j < 16 low, else high).
__device__ __forceinline__ int qf_nibble(const qf_u8* qs, int j) {
    return j < QK / 2 ? (qs[j] & 0xf) : (qs[j - QK / 2] >> 4);
}

__device__ __forceinline__ int qf_high_bit(const qf_u8* qh, int j) {
    qf_u32 bits = (qf_u32)qh[0] | ((qf_u32)qh[1] << 8) | ((qf_u32)qh[2] << 16) | ((qf_u32)qh[3] << 24);
    return (int)(((bits >> j) & 1u) << 4);
}

QF_KERNEL(qf_decode_q4_0)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    QfGroup g = qf_group(n_blocks);
    if (!g.active) return;
    const qf_u8* b = (const qf_u8*)source + g.block * 18;
    float d = qf_f16_to_f32(qf_load_u16(b));
    ((float*)destination)[g.block * QK + g.lane] = (float)(qf_nibble(b + 2, g.lane) - 8) * d;
}

QF_KERNEL(qf_decode_q4_1)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    QfGroup g = qf_group(n_blocks);
    if (!g.active) return;
    const qf_u8* b = (const qf_u8*)source + g.block * 20;
    float d = qf_f16_to_f32(qf_load_u16(b)), m = qf_f16_to_f32(qf_load_u16(b + 2));
    ((float*)destination)[g.block * QK + g.lane] = (float)qf_nibble(b + 4, g.lane) * d + m;
}

QF_KERNEL(qf_decode_q5_0)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    QfGroup g = qf_group(n_blocks);
    if (!g.active) return;
    const qf_u8* b = (const qf_u8*)source + g.block * 22;
    float d = qf_f16_to_f32(qf_load_u16(b));
    int x = (qf_nibble(b + 6, g.lane) | qf_high_bit(b + 2, g.lane)) - 16;
    ((float*)destination)[g.block * QK + g.lane] = (float)x * d;
}

QF_KERNEL(qf_decode_q5_1)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    QfGroup g = qf_group(n_blocks);
    if (!g.active) return;
    const qf_u8* b = (const qf_u8*)source + g.block * 24;
    float d = qf_f16_to_f32(qf_load_u16(b)), m = qf_f16_to_f32(qf_load_u16(b + 2));
    int x = qf_nibble(b + 8, g.lane) | qf_high_bit(b + 4, g.lane);
    ((float*)destination)[g.block * QK + g.lane] = (float)x * d + m;
}

QF_KERNEL(qf_decode_q8_0)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    QfGroup g = qf_group(n_blocks);
    if (!g.active) return;
    const qf_u8* b = (const qf_u8*)source + g.block * 34;
    float d = qf_f16_to_f32(qf_load_u16(b));
    ((float*)destination)[g.block * QK + g.lane] = (float)(signed char)b[2 + g.lane] * d;
}

// Q8_1: Q8_0 with the block's sum beside its scale (unused by decoding).
QF_KERNEL(qf_decode_q8_1)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    QfGroup g = qf_group(n_blocks);
    if (!g.active) return;
    const qf_u8* b = (const qf_u8*)source + g.block * 36;
    float d = qf_f16_to_f32(qf_load_u16(b));
    ((float*)destination)[g.block * QK + g.lane] = (float)(signed char)b[4 + g.lane] * d;
}
