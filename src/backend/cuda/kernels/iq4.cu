// IQ4_NL and IQ4_XS: decode, and encode without importance weights, as
// src/codecs/iq4.rs defines them. A block of 256 threads owns 8 sub-blocks
// of 32 values: eight IQ4_NL blocks, or one IQ4_XS super-block.
//
// A sub-block's scale search tries the largest value's scale and 15 more;
// the trials are independent, so a thread computes one (sub-block, trial)
// pair's sums in the scalar order, and one thread a sub-block replays the
// scalar selection over them.

#define IQ4_TRIALS 16

// ggml's kvalues_iq4nl (src/codecs/blocks.rs KVALUES; a test holds the two equal).
__constant__ signed char qf_kvalues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// ggml's best_index_int8: the nearest table value (the upper on a tie), by bisection.
__device__ int qf_best_index(float x) {
    if (x <= (float)qf_kvalues[0]) return 0;
    if (x >= (float)qf_kvalues[15]) return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        int mav = (ml + mu) / 2;
        if (x < (float)qf_kvalues[mav]) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    return x - (float)qf_kvalues[mu - 1] < (float)qf_kvalues[mu] - x ? mu - 1 : mu;
}

// Trial 0 maps the largest value to the table's most negative entry; trial
// k > 0 is itry = k - 8 of -7 … 7.
__device__ float qf_iq4_trial_id(int trial, float max) {
    if (trial == 0) return 1.0f / (-max / (float)qf_kvalues[0]);
    return (float)(trial - 8 + qf_kvalues[0]) / max;
}

// Each of the block's 8 sub-blocks' scales (sub_block_scale): x and w are
// the block's 256 values and weights; scales gets 8.
__device__ void qf_iq4_scales(const float* x, const float* w, float* scales) {
    __shared__ float max[8], amax[8], sumqx[8][IQ4_TRIALS], sumq2[8][IQ4_TRIALS];
    int t = threadIdx.x;
    if (t < 8) max[t] = qf_signed_absmax(x + 32 * t, 32, &amax[t]);
    __syncthreads();
    if (t < 8 * IQ4_TRIALS) {
        int sub = t / IQ4_TRIALS, trial = t % IQ4_TRIALS;
        float id = qf_iq4_trial_id(trial, max[sub]);
        float qx = 0.0f, q2 = 0.0f;
        for (int i = 0; i < 32; i++) {
            float v = x[32 * sub + i], wi = w[32 * sub + i];
            float q = (float)qf_kvalues[qf_best_index(id * v)];
            qx += wi * q * v;
            q2 += wi * q * q;
        }
        sumqx[sub][trial] = qx;
        sumq2[sub][trial] = q2;
    }
    __syncthreads();
    if (t < 8) {
        if (amax[t] < 1e-15f) {
            scales[t] = 0.0f;
        } else {
            float d = sumq2[t][0] > 0.0f ? sumqx[t][0] / sumq2[t][0] : 0.0f;
            float best = d * sumqx[t][0];
            for (int trial = 1; trial < IQ4_TRIALS; trial++) {
                float qx = sumqx[t][trial], q2 = sumq2[t][trial];
                if (q2 > 0.0f && qx * qx > best * q2) {
                    d = qx / q2;
                    best = d * qx;
                }
            }
            scales[t] = d;
        }
    }
    __syncthreads();
}

// Each value's weight over a super-block of `len` (32 or 256) values: with
// importance, qw · sqrt(σ² + x²), σ² twice the mean square; without, x².
__device__ void qf_iq4_weights(const float* x, float* w, int len, const float* importance, qf_u64 first,
                               qf_u64 n_per_row) {
    __shared__ float sigma2[8];
    int t = threadIdx.x;
    if (importance && t % len == 0) {
        float s = 0.0f;
        for (int i = 0; i < len; i++) s += x[t + i] * x[t + i];
        sigma2[t / len] = s * (2.0f / (float)len);
    }
    __syncthreads();
    w[t] = importance ? importance[(first + t) % n_per_row] * sqrtf(sigma2[t / len] + x[t] * x[t]) : x[t] * x[t];
    __syncthreads();
}

// Packs a sub-block's indices, low nibbles first (threads 0..127, a byte each).
__device__ void qf_iq4_pack(const qf_u8* indices, qf_u8* qs, int t) {
    if (t < 128) {
        int sub = t / 16, j = t % 16;
        qs[16 * sub + j] = (qf_u8)(indices[32 * sub + j] | (indices[32 * sub + j + 16] << 4));
    }
}

QF_KERNEL(qf_encode_iq4_nl)(const void* source, void* destination, qf_u64 n_blocks, const float* importance,
                            qf_u64 n_per_row) {
    __shared__ float x[QF_THREADS], w[QF_THREADS], scales[8];
    __shared__ qf_u8 indices[QF_THREADS];
    int t = threadIdx.x;
    qf_u64 first = (qf_u64)blockIdx.x * 8;
    bool active = first + t / 32 < n_blocks;
    x[t] = active ? ((const float*)source)[first * 32 + t] : 0.0f;
    __syncthreads();
    qf_iq4_weights(x, w, 32, importance, first * 32, n_per_row);
    qf_iq4_scales(x, w, scales);
    float scale = scales[t / 32];
    float id = scale != 0.0f ? 1.0f / scale : 0.0f;
    indices[t] = (qf_u8)qf_best_index(id * x[t]);
    __syncthreads();
    if (t < 128 && first + t / 16 < n_blocks) {
        int sub = t / 16, j = t % 16;
        qf_u8* out = (qf_u8*)destination + (first + sub) * 18;
        if (j == 0) qf_store_u16(out, qf_f32_to_f16(scales[sub]));
        out[2 + j] = (qf_u8)(indices[32 * sub + j] | (indices[32 * sub + j + 16] << 4));
    }
}

QF_KERNEL(qf_encode_iq4_xs)(const void* source, void* destination, qf_u64 n_blocks, const float* importance,
                            qf_u64 n_per_row) {
    __shared__ float x[QF_THREADS], w[QF_THREADS], scales[8];
    __shared__ qf_u8 indices[QF_THREADS];
    __shared__ int levels[8];
    __shared__ float block_d;
    int t = threadIdx.x;
    qf_u64 block = blockIdx.x;
    bool active = block < n_blocks;
    x[t] = active ? ((const float*)source)[block * 256 + t] : 0.0f;
    __syncthreads();
    qf_iq4_weights(x, w, 256, importance, block * 256, n_per_row);
    qf_iq4_scales(x, w, scales);
    if (t == 0) {
        float amax_scale;
        float max_scale = qf_signed_absmax(scales, 8, &amax_scale);
        float d = -max_scale / 32.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int ib = 0; ib < 8; ib++) levels[ib] = qf_clamp(qf_nearest_int(id * scales[ib]), -32, 31);
        block_d = d;
    }
    __syncthreads();
    float dl = block_d * (float)levels[t / 32];
    float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
    indices[t] = (qf_u8)qf_best_index(idl * x[t]);
    __syncthreads();
    if (!active) return;
    qf_u8* out = (qf_u8*)destination + block * 136;
    if (t == 0) {
        qf_store_u16(out, qf_f32_to_f16(block_d));
        qf_u16 high = 0;
        for (int ib = 0; ib < 8; ib++) high |= (qf_u16)(((levels[ib] + 32) >> 4) << (2 * ib));
        qf_store_u16(out + 2, high);
    }
    if (t < 4) {
        out[4 + t] = (qf_u8)(((levels[2 * t] + 32) & 0xf) | (((levels[2 * t + 1] + 32) & 0xf) << 4));
    }
    qf_iq4_pack(indices, out + 8, t);
}

QF_KERNEL(qf_decode_iq4_nl)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    qf_u64 block = (qf_u64)blockIdx.x * 8 + threadIdx.x / 32;
    if (block >= n_blocks) return;
    const qf_u8* b = (const qf_u8*)source + block * 18;
    int j = threadIdx.x % 32;
    int q = j < 16 ? (b[2 + j] & 0xf) : (b[2 + j - 16] >> 4);
    ((float*)destination)[block * 32 + j] = qf_f16_to_f32(qf_load_u16(b)) * (float)qf_kvalues[q];
}

QF_KERNEL(qf_decode_iq4_xs)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    qf_u64 block = blockIdx.x;
    if (block >= n_blocks) return;
    const qf_u8* b = (const qf_u8*)source + block * 136;
    int e = threadIdx.x, ib = e / 32, j = e % 32;
    int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf) | (((qf_load_u16(b + 2) >> (2 * ib)) & 3) << 4);
    float dl = qf_f16_to_f32(qf_load_u16(b)) * (float)(ls - 32);
    const qf_u8* qs = b + 8 + 16 * ib;
    int q = j < 16 ? (qs[j] & 0xf) : (qs[j - 16] >> 4);
    ((float*)destination)[block * 256 + e] = dl * (float)qf_kvalues[q];
}
