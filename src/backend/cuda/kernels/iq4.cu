// IQ4_NL and IQ4_XS: decode, and encode with and without importance
// weights, as src/codecs/iq4.rs defines them.
//
// A sub-block's scale search tries the largest value's scale and 15 more.
// An encoder's thread searches one 32-value sub-block in its registers, so
// a block covers 256 of them: 256 IQ4_NL blocks, or 32 IQ4_XS super-blocks.
// Decoders run a thread a value.

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

// A sub-block's scale (sub_block_scale) from its values and weights, the
// trials in order.
__device__ __forceinline__ float qf_iq4_scale(const float* x, const float* w) {
    float amax;
    float max = qf_signed_absmax(x, 32, &amax);
    if (amax < 1e-15f) return 0.0f;
    float d = 0.0f, best = 0.0f;
    for (int trial = 0; trial < IQ4_TRIALS; trial++) {
        float id = qf_iq4_trial_id(trial, max);
        float qx = 0.0f, q2 = 0.0f;
        QF_UNROLL
        for (int i = 0; i < 32; i++) {
            float q = (float)qf_kvalues[qf_best_index(id * x[i])];
            qx += w[i] * q * x[i];
            q2 += w[i] * q * q;
        }
        if (trial == 0) {
            d = q2 > 0.0f ? qx / q2 : 0.0f;
            best = d * qx;
        } else if (q2 > 0.0f && qx * qx > best * q2) {
            d = qx / q2;
            best = d * qx;
        }
    }
    return d;
}

// A sub-block's weights: with importance, qw · sqrt(σ² + x²) (σ² given);
// without, x². `first` is its first value's element of the row.
__device__ __forceinline__ void qf_iq4_weights(const float* x, const float* importance, qf_u64 first,
                                               qf_u64 n_per_row, float sigma2, float* w) {
    QF_UNROLL
    for (int i = 0; i < 32; i++) {
        w[i] = importance ? importance[(first + i) % n_per_row] * sqrtf(sigma2 + x[i] * x[i]) : x[i] * x[i];
    }
}

// A sub-block's indices into the table at inverse scale id, in shared memory.
__device__ __forceinline__ void qf_iq4_indices(const float* x, float id, qf_u8* indices) {
    QF_UNROLL
    for (int i = 0; i < 32; i++) indices[i] = (qf_u8)qf_best_index(id * x[i]);
}

// Byte j (< 16) of a sub-block's packed indices: index j low, j + 16 high.
__device__ __forceinline__ qf_u8 qf_iq4_byte(const qf_u8* indices, int j) {
    return (qf_u8)(indices[j] | (indices[j + 16] << 4));
}

QF_KERNEL(qf_encode_iq4_nl)(const void* source, void* destination, qf_u64 n_blocks, const float* importance,
                            qf_u64 n_per_row) {
    __shared__ float staged[QF_THREADS * 33], scales[QF_THREADS];
    __shared__ qf_u8 indices[QF_THREADS * 32];
    int t = threadIdx.x;
    qf_u64 first_block = (qf_u64)blockIdx.x * QF_THREADS, first = first_block * 32;
    qf_stage_groups<32>((const float*)source, first, n_blocks * 32, staged);
    float x[32], w[32];
    qf_own_group<32>(staged, x);
    float sigma2 = 0.0f;
    if (importance) {
        float s = 0.0f;
        QF_UNROLL
        for (int i = 0; i < 32; i++) s += x[i] * x[i];
        sigma2 = s * (2.0f / 32.0f);
    }
    qf_iq4_weights(x, importance, first + 32 * t, n_per_row, sigma2, w);
    float scale = qf_iq4_scale(x, w);
    scales[t] = scale;
    qf_iq4_indices(x, scale != 0.0f ? 1.0f / scale : 0.0f, indices + 32 * t);
    __syncthreads();
    qf_u8* out = (qf_u8*)destination + first_block * 18;
    for (int k = t; k < QF_THREADS * 18; k += QF_THREADS) {
        int block = k / 18, b = k % 18;
        if (first_block + block >= n_blocks) break;
        out[k] = b < 2 ? qf_u16_pair_byte(qf_f32_to_f16(scales[block]), 0, b) : qf_iq4_byte(indices + 32 * block, b - 2);
    }
}

QF_KERNEL(qf_encode_iq4_xs)(const void* source, void* destination, qf_u64 n_blocks, const float* importance,
                            qf_u64 n_per_row) {
    const int super_blocks = qf_searched_super_blocks(32);
    __shared__ float staged[QF_THREADS * 33], scales[QF_THREADS], squares[super_blocks], block_d[super_blocks];
    __shared__ int levels[QF_THREADS];
    __shared__ qf_u8 indices[QF_THREADS * 32];
    int t = threadIdx.x;
    qf_u64 first_block = (qf_u64)blockIdx.x * super_blocks, first = first_block * QK_K;
    qf_stage_groups<32>((const float*)source, first, n_blocks * QK_K, staged);
    if (importance) qf_staged_sums_of_squares<32>(staged, squares);
    float x[32], w[32];
    qf_own_group<32>(staged, x);
    float sigma2 = importance ? squares[t / 8] * (2.0f / 256.0f) : 0.0f;
    qf_iq4_weights(x, importance, first + 32 * t, n_per_row, sigma2, w);
    scales[t] = qf_iq4_scale(x, w);
    __syncthreads();
    if (t < super_blocks) {
        float amax_scale;
        float max_scale = qf_signed_absmax(scales + 8 * t, 8, &amax_scale);
        float d = -max_scale / 32.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int ib = 0; ib < 8; ib++) levels[8 * t + ib] = qf_clamp(qf_nearest_int(id * scales[8 * t + ib]), -32, 31);
        block_d[t] = d;
    }
    __syncthreads();
    float dl = block_d[t / 8] * (float)levels[t];
    qf_iq4_indices(x, dl != 0.0f ? 1.0f / dl : 0.0f, indices + 32 * t);
    __syncthreads();
    qf_u8* out = (qf_u8*)destination + first_block * 136;
    for (int k = t; k < super_blocks * 136; k += QF_THREADS) {
        int block = k / 136, b = k % 136;
        if (first_block + block >= n_blocks) break;
        const int* l = levels + 8 * block;
        qf_u8 byte;
        if (b < 4) {
            qf_u16 high = 0;
            for (int ib = 0; ib < 8; ib++) high |= (qf_u16)(((l[ib] + 32) >> 4) << (2 * ib));
            byte = qf_u16_pair_byte(qf_f32_to_f16(block_d[block]), high, b);
        } else if (b < 8) {
            int q = b - 4;
            byte = (qf_u8)(((l[2 * q] + 32) & 0xf) | (((l[2 * q + 1] + 32) & 0xf) << 4));
        } else {
            int q = b - 8;
            byte = qf_iq4_byte(indices + 32 * (8 * block + q / 16), q % 16);
        }
        out[k] = byte;
    }
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
