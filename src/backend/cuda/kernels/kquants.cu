// The K-quants: decode Q2_K … Q8_K, and encode Q2_K … Q6_K with and without
// importance weights, as src/codecs/kquants.rs and search.rs define them.
//
// The searches try many scales per group, and each trial's sums must be the
// scalar loop's, in its order (and a make_qkx trial depends on the ones
// before it), so a thread searches one group, in its registers, and an
// encoder's block covers as many super-blocks as it has threads for
// groups: every thread searches. Decoders run a thread a value.

// Scale and minimum of group j of a Q4_K/Q5_K block (ggml's get_scale_min_k4).
__device__ __forceinline__ void qf_scale_min_k4(int j, const qf_u8* q, int* scale, int* min) {
    if (j < 4) {
        *scale = q[j] & 63;
        *min = q[j + 4] & 63;
    } else {
        *scale = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Byte b (< 64) of a super-block's 2-bit levels: levels l, l+32, l+64 and
// l+96 of its 128-value half, b = 32·half + l; each level's low two bits.
__device__ __forceinline__ qf_u8 qf_2bit_byte(const qf_u8* levels, int b) {
    const qf_u8* at = levels + 128 * (b / 32) + b % 32;
    return (qf_u8)((at[0] & 3) | ((at[32] & 3) << 2) | ((at[64] & 3) << 4) | ((at[96] & 3) << 6));
}

QF_KERNEL(qf_decode_q2_k)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    qf_u64 block = blockIdx.x;
    if (block >= n_blocks) return;
    const qf_u8* b = (const qf_u8*)source + block * 84;
    int e = threadIdx.x, half = e / 128, shift = (e % 128) / 32, part = (e % 32) / 16, l = e % 16;
    int sc = b[half * 8 + shift * 2 + part];
    float d = qf_f16_to_f32(qf_load_u16(b + 80)), min = qf_f16_to_f32(qf_load_u16(b + 82));
    int level = (b[16 + half * 32 + l + part * 16] >> (2 * shift)) & 3;
    ((float*)destination)[block * QK_K + e] = d * (float)(sc & 0xf) * (float)level - min * (float)(sc >> 4);
}

QF_KERNEL(qf_decode_q3_k)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    qf_u64 block = blockIdx.x;
    if (block >= n_blocks) return;
    const qf_u8* b = (const qf_u8*)source + block * 110;
    int e = threadIdx.x, half = e / 128, shift = (e % 128) / 32, part = (e % 32) / 16, l = e % 16;
    int j = half * 8 + shift * 2 + part;
    const qf_u8* packed = b + 96;
    int low_scale = j < 8 ? (packed[j] & 0xf) : (packed[j - 8] >> 4);
    int high_scale = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    int scale = (int)(signed char)(qf_u8)(low_scale | (high_scale << 4)) - 32;
    float d = qf_f16_to_f32(qf_load_u16(b + 108));
    int low = (b[32 + half * 32 + l + part * 16] >> (2 * shift)) & 3;
    int high = (b[l + part * 16] & (1 << (half * 4 + shift))) ? 0 : 4;
    ((float*)destination)[block * QK_K + e] = d * (float)scale * (float)(low - high);
}

// Q4_K (with_high false) and Q5_K share their layout of scales.
__device__ void qf_decode_k4(const void* source, void* destination, qf_u64 n_blocks, bool five_bits) {
    qf_u64 block = blockIdx.x;
    if (block >= n_blocks) return;
    const qf_u8* b = (const qf_u8*)source + block * (five_bits ? 176 : 144);
    int e = threadIdx.x, pair = e / 64, l = e % 32, upper = (e % 64) / 32;
    int scale, min;
    qf_scale_min_k4(2 * pair + upper, b + 4, &scale, &min);
    float d = qf_f16_to_f32(qf_load_u16(b)), dmin = qf_f16_to_f32(qf_load_u16(b + 2));
    const qf_u8* qs = b + (five_bits ? 48 : 16);
    int q = qs[pair * 32 + l];
    int level = upper ? (q >> 4) : (q & 0xf);
    if (five_bits && (b[16 + l] & ((upper ? 2 : 1) << (2 * pair)))) level += 16;
    ((float*)destination)[block * QK_K + e] = d * (float)scale * (float)level - dmin * (float)min;
}

QF_KERNEL(qf_decode_q4_k)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    qf_decode_k4(source, destination, n_blocks, false);
}

QF_KERNEL(qf_decode_q5_k)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    qf_decode_k4(source, destination, n_blocks, true);
}

QF_KERNEL(qf_decode_q6_k)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    qf_u64 block = blockIdx.x;
    if (block >= n_blocks) return;
    const qf_u8* b = (const qf_u8*)source + block * 210;
    int e = threadIdx.x, half = e / 128, k = (e % 128) / 32, l = e % 32;
    const qf_u8* ql = b + half * 64;
    const qf_u8* qh = b + 128 + half * 32;
    int low = (k % 2 == 0 ? ql[l] : ql[l + 32]);
    low = k < 2 ? (low & 0xf) : (low >> 4);
    int q = (int)(signed char)(qf_u8)(low | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
    int scale = (signed char)b[192 + half * 8 + l / 16 + 2 * k];
    float d = qf_f16_to_f32(qf_load_u16(b + 208));
    ((float*)destination)[block * QK_K + e] = d * (float)scale * (float)q;
}

// ---------------------------------------------------------------- Q6_K

// With importance weights, each value's weight is its importance as given
// (ggml's quantize_row_q6_K_impl); without, its square. A block covers 16
// super-blocks, a thread a 16-value group, in the shape of Q4_K's.
QF_KERNEL(qf_encode_q6_k)(const void* source, void* destination, qf_u64 n_blocks, const float* importance,
                          qf_u64 n_per_row) {
    const int super_blocks = qf_searched_super_blocks(16);
    __shared__ float staged[QF_THREADS * 17], scales[QF_THREADS], block_d[super_blocks];
    __shared__ signed char packed_scales[super_blocks][16];
    __shared__ qf_u8 levels[super_blocks * QK_K];
    __shared__ bool zero_block[super_blocks];
    int t = threadIdx.x;
    qf_u64 first_block = (qf_u64)blockIdx.x * super_blocks;
    qf_stage_groups<16>((const float*)source, first_block * QK_K, n_blocks * QK_K, staged);
    float x[16], w[16];
    qf_own_group<16>(staged, x);
    QF_UNROLL
    for (int i = 0; i < 16; i++) {
        w[i] = importance ? importance[(first_block * QK_K + 16 * t + i) % n_per_row] : x[i] * x[i];
    }
    scales[t] = qf_make_qx<16>(x, w, 32, (signed char*)levels + 16 * t);
    __syncthreads();
    if (t < super_blocks) {
        float max_abs_scale;
        float max_scale = qf_signed_absmax(scales + 16 * t, 16, &max_abs_scale);
        bool zero = max_abs_scale < 1e-15f;
        float iscale = zero ? 0.0f : -128.0f / max_scale;
        for (int j = 0; j < 16; j++) {
            int s = qf_nearest_int(iscale * scales[16 * t + j]);
            packed_scales[t][j] = (signed char)(s < 127 ? s : 127);
        }
        zero_block[t] = zero;
        block_d[t] = zero ? 0.0f : 1.0f / iscale;
    }
    __syncthreads();
    {
        // A group whose scale rounds to zero keeps its search's levels.
        int block = t / 16;
        float d = qf_f16_to_f32(qf_f32_to_f16(block_d[block])) * (float)packed_scales[block][t % 16];
        if (d != 0.0f) {
            QF_UNROLL
            for (int i = 0; i < 16; i++) levels[16 * t + i] = (qf_u8)(qf_clamp(qf_nearest_int(x[i] / d), -32, 31) + 32);
        }
    }
    __syncthreads();
    qf_u8* out = (qf_u8*)destination + first_block * 210;
    for (int k = t; k < super_blocks * 210; k += QF_THREADS) {
        int block = k / 210, b = k % 210;
        if (first_block + block >= n_blocks) break;
        const qf_u8* l = levels + QK_K * block;
        qf_u8 byte;
        if (zero_block[block]) {
            byte = 0;
        } else if (b < 128) {
            // Low nibbles: value i of a 64-value quarter with value i + 64.
            int half = b / 64, at = 128 * half + 32 * ((b % 64) / 32) + b % 32;
            byte = (qf_u8)((l[at] & 0xf) | ((l[at + 64] & 0xf) << 4));
        } else if (b < 192) {
            int q = b - 128, at = 128 * (q / 32) + q % 32;
            byte = (qf_u8)((l[at] >> 4) | ((l[at + 32] >> 4) << 2) | ((l[at + 64] >> 4) << 4) | ((l[at + 96] >> 4) << 6));
        } else if (b < 208) {
            byte = (qf_u8)packed_scales[block][b - 192];
        } else {
            qf_u16 d = qf_f32_to_f16(block_d[block]);
            byte = qf_u16_pair_byte(d, d, b - 208);
        }
        out[k] = byte;
    }
}

// ---------------------------------------------------------------- Q4_K and Q5_K

// Six-bit scales and minimums in Q4_K/Q5_K's 12-byte layout (ls, lm ≤ 63).
__device__ void qf_pack_scales_k4(qf_u8* ls, qf_u8* lm, qf_u8* packed) {
    for (int j = 0; j < 12; j++) packed[j] = 0;
    for (int j = 0; j < 8; j++) {
        ls[j] = ls[j] < 63 ? ls[j] : 63;
        lm[j] = lm[j] < 63 ? lm[j] : 63;
        if (j < 4) {
            packed[j] = ls[j];
            packed[j + 4] = lm[j];
        } else {
            packed[j + 4] = (qf_u8)((ls[j] & 0xf) | ((lm[j] & 0xf) << 4));
            packed[j - 4] |= (qf_u8)((ls[j] >> 4) << 6);
            packed[j] |= (qf_u8)((lm[j] >> 4) << 6);
        }
    }
}

// The unweighted block scales: each group's scale and minimum on a 6-bit
// grid of the largest.
__device__ void qf_k4_block_scales(const float* scales, const float* neg_mins, qf_u8* packed, qf_u16* d_bits,
                                   qf_u16* dmin_bits) {
    float max_scale = qf_largest(scales, 8), max_min = qf_largest(neg_mins, 8);
    float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    qf_u8 ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (qf_u8)qf_nearest_int(inv_scale * scales[j]);
        lm[j] = (qf_u8)qf_nearest_int(inv_min * neg_mins[j]);
    }
    qf_pack_scales_k4(ls, lm, packed);
    *d_bits = qf_f32_to_f16(max_scale / 63.0f);
    *dmin_bits = qf_f32_to_f16(max_min / 63.0f);
}

// Q4_K (nmax 15: rmin -1, 20 steps) and Q5_K (nmax 31: rmin -0.5, 15 steps);
// with importance weights make_qkx3_quants, and make_qp_quants for the
// block's scales and minimums. A block covers 32 super-blocks: thread t
// searches group t % 8 of super-block t / 8 in its registers, a thread a
// super-block chooses its scales, every thread requantizes its group, and
// all pack the bytes.
__device__ void qf_encode_k4(const void* source, void* destination, qf_u64 n_blocks, int nmax,
                             const float* importance, qf_u64 n_per_row) {
    const int super_blocks = qf_searched_super_blocks(32);
    __shared__ float staged[QF_THREADS * 33], squares[super_blocks];
    __shared__ float g_scale[QF_THREADS], g_neg_min[QF_THREADS], group_weight[QF_THREADS];
    __shared__ qf_u8 scales_packed[super_blocks][12], levels[super_blocks * QK_K];
    __shared__ qf_u16 d_bits[super_blocks], dmin_bits[super_blocks];
    int t = threadIdx.x;
    qf_u64 first_block = (qf_u64)blockIdx.x * super_blocks;
    qf_stage_groups<32>((const float*)source, first_block * QK_K, n_blocks * QK_K, staged);
    float x[32], w[32];
    qf_own_group<32>(staged, x);
    if (importance) {
        qf_staged_sums_of_squares<32>(staged, squares);
        float sigma2 = 2.0f * squares[t / 8] / 256.0f;
        group_weight[t] = qf_group_weights<32>(x, importance, first_block * QK_K + 32 * t, n_per_row, sigma2, w);
        qf_make_qkx<32>(x, w, nmax, -0.9f, 0.05f, 36, false, true, levels + 32 * t, &g_scale[t], &g_neg_min[t]);
    } else {
        float sum_x2 = 0.0f;
        QF_UNROLL
        for (int i = 0; i < 32; i++) sum_x2 = sum_x2 + x[i] * x[i];
        float av_x = sqrtf(sum_x2 / 32.0f);
        QF_UNROLL
        for (int i = 0; i < 32; i++) w[i] = av_x + fabsf(x[i]);
        float rmin = nmax == 15 ? -1.0f : -0.5f;
        int nstep = nmax == 15 ? 20 : 15;
        qf_make_qkx<32>(x, w, nmax, rmin, 0.1f, nstep, false, false, levels + 32 * t, &g_scale[t], &g_neg_min[t]);
    }
    __syncthreads();
    if (t < super_blocks) {
        if (importance) {
            qf_u8 ls[8], lm[8];
            float d_block = qf_make_qp(8, 63, g_scale + 8 * t, group_weight + 8 * t, ls);
            float m_block = qf_make_qp(8, 63, g_neg_min + 8 * t, group_weight + 8 * t, lm);
            qf_pack_scales_k4(ls, lm, scales_packed[t]);
            d_bits[t] = qf_f32_to_f16(d_block);
            dmin_bits[t] = qf_f32_to_f16(m_block);
        } else {
            qf_k4_block_scales(g_scale + 8 * t, g_neg_min + 8 * t, scales_packed[t], &d_bits[t], &dmin_bits[t]);
        }
    }
    __syncthreads();
    {
        // The block's scales round every level again; a group whose scale
        // rounds to zero keeps its search's levels.
        int block = t / 8, scale, min;
        qf_scale_min_k4(t % 8, scales_packed[block], &scale, &min);
        float dj = qf_f16_to_f32(d_bits[block]) * (float)scale;
        if (dj != 0.0f) {
            float dm = qf_f16_to_f32(dmin_bits[block]) * (float)min;
            QF_UNROLL
            for (int i = 0; i < 32; i++) levels[32 * t + i] = (qf_u8)qf_clamp(qf_nearest_int((x[i] + dm) / dj), 0, nmax);
        }
    }
    __syncthreads();
    int block_bytes = nmax == 15 ? 144 : 176;
    qf_u8* out = (qf_u8*)destination + first_block * block_bytes;
    for (int k = t; k < super_blocks * block_bytes; k += QF_THREADS) {
        int block = k / block_bytes, b = k % block_bytes;
        if (first_block + block >= n_blocks) break;
        const qf_u8* l = levels + QK_K * block;
        qf_u8 byte;
        if (b < 4) {
            byte = qf_u16_pair_byte(d_bits[block], dmin_bits[block], b);
        } else if (b < 16) {
            byte = scales_packed[block][b - 4];
        } else if (nmax == 15) {
            int q = b - 16, at = 64 * (q / 32) + q % 32;
            byte = (qf_u8)(l[at] | (l[at + 32] << 4));
        } else if (b < 48) {
            int at = b - 16;
            byte = 0;
            for (int pair = 0; pair < 4; pair++) {
                if (l[64 * pair + at] > 15) byte |= (qf_u8)(1 << (2 * pair));
                if (l[64 * pair + at + 32] > 15) byte |= (qf_u8)(2 << (2 * pair));
            }
        } else {
            int q = b - 48, at = 64 * (q / 32) + q % 32;
            byte = (qf_u8)((l[at] & 0xf) | ((l[at + 32] & 0xf) << 4));
        }
        out[k] = byte;
    }
}

QF_KERNEL(qf_encode_q4_k)(const void* source, void* destination, qf_u64 n_blocks, const float* importance,
                          qf_u64 n_per_row) {
    qf_encode_k4(source, destination, n_blocks, 15, importance, n_per_row);
}

QF_KERNEL(qf_encode_q5_k)(const void* source, void* destination, qf_u64 n_blocks, const float* importance,
                          qf_u64 n_per_row) {
    qf_encode_k4(source, destination, n_blocks, 31, importance, n_per_row);
}

// ---------------------------------------------------------------- Q2_K

// The unweighted Q2_K block scales: 4-bit scales and minimums on grids of
// the largest of each.
__device__ void qf_q2_k_block_scales(const float* scales, const float* mins, qf_u8* packed, float* block_d,
                                     float* block_dmin) {
    float max_scale = qf_largest(scales, 16), max_min = qf_largest(mins, 16);
    float iscale = max_scale > 0.0f ? 15.0f / max_scale : 0.0f;
    for (int j = 0; j < 16; j++) packed[j] = max_scale > 0.0f ? (qf_u8)qf_nearest_int(iscale * scales[j]) : 0;
    qf_u16 d = qf_f32_to_f16(max_scale > 0.0f ? max_scale / 15.0f : 0.0f);
    if (max_min > 0.0f) {
        float imin = 15.0f / max_min;
        for (int j = 0; j < 16; j++) packed[j] |= (qf_u8)(qf_nearest_int(imin * mins[j]) << 4);
    }
    qf_u16 dmin = qf_f32_to_f16(max_min > 0.0f ? max_min / 15.0f : 0.0f);
    *block_d = qf_f16_to_f32(d);
    *block_dmin = qf_f16_to_f32(dmin);
}

// With importance weights: make_qkx3_quants per group, make_qp_quants for
// the block's scales and minimums. A block covers 16 super-blocks, a
// thread a 16-value group, in the shape of Q4_K's.
QF_KERNEL(qf_encode_q2_k)(const void* source, void* destination, qf_u64 n_blocks, const float* importance,
                          qf_u64 n_per_row) {
    const int super_blocks = qf_searched_super_blocks(16);
    __shared__ float staged[QF_THREADS * 17], squares[super_blocks];
    __shared__ float scales[QF_THREADS], mins[QF_THREADS], group_weight[QF_THREADS];
    __shared__ qf_u8 packed[super_blocks][16], levels[super_blocks * QK_K];
    __shared__ float block_d[super_blocks], block_dmin[super_blocks];
    int t = threadIdx.x;
    qf_u64 first_block = (qf_u64)blockIdx.x * super_blocks;
    qf_stage_groups<16>((const float*)source, first_block * QK_K, n_blocks * QK_K, staged);
    float x[16], w[16];
    qf_own_group<16>(staged, x);
    if (importance) {
        qf_staged_sums_of_squares<16>(staged, squares);
        float sigma2 = squares[t / 16] / 256.0f;
        group_weight[t] = qf_group_weights<16>(x, importance, first_block * QK_K + 16 * t, n_per_row, sigma2, w);
        qf_make_qkx<16>(x, w, 3, -0.9f, 0.05f, 36, false, true, levels + 16 * t, &scales[t], &mins[t]);
    } else {
        QF_UNROLL
        for (int i = 0; i < 16; i++) w[i] = fabsf(x[i]);
        qf_make_qkx<16>(x, w, 3, -0.5f, 0.1f, 15, true, false, levels + 16 * t, &scales[t], &mins[t]);
    }
    __syncthreads();
    if (t < super_blocks) {
        if (importance) {
            qf_u8 ls[16], lm[16];
            qf_u16 d = qf_f32_to_f16(qf_make_qp(16, 15, scales + 16 * t, group_weight + 16 * t, ls));
            qf_u16 dmin = qf_f32_to_f16(qf_make_qp(16, 15, mins + 16 * t, group_weight + 16 * t, lm));
            for (int j = 0; j < 16; j++) packed[t][j] = (qf_u8)(ls[j] | (lm[j] << 4));
            block_d[t] = qf_f16_to_f32(d);
            block_dmin[t] = qf_f16_to_f32(dmin);
        } else {
            qf_q2_k_block_scales(scales + 16 * t, mins + 16 * t, packed[t], &block_d[t], &block_dmin[t]);
        }
    }
    __syncthreads();
    {
        int block = t / 16, g = t % 16;
        float d = block_d[block] * (float)(packed[block][g] & 0xf);
        if (d != 0.0f) {
            float m = block_dmin[block] * (float)(packed[block][g] >> 4);
            QF_UNROLL
            for (int i = 0; i < 16; i++) levels[16 * t + i] = (qf_u8)qf_clamp(qf_nearest_int((x[i] + m) / d), 0, 3);
        }
    }
    __syncthreads();
    qf_u8* out = (qf_u8*)destination + first_block * 84;
    for (int k = t; k < super_blocks * 84; k += QF_THREADS) {
        int block = k / 84, b = k % 84;
        if (first_block + block >= n_blocks) break;
        qf_u8 byte;
        if (b < 16) {
            byte = packed[block][b];
        } else if (b < 80) {
            byte = qf_2bit_byte(levels + QK_K * block, b - 16);
        } else {
            byte = qf_u16_pair_byte(qf_f32_to_f16(block_d[block]), qf_f32_to_f16(block_dmin[block]), b - 80);
        }
        out[k] = byte;
    }
}

// ---------------------------------------------------------------- Q3_K

// make_q3_quants with its coordinate descent, on one group of 16 (in
// registers when the group is): levels in [0, 8) (0 for a group of zeros);
// returns the scale.
__device__ __forceinline__ float qf_make_q3(const float* x, signed char* levels) {
    const int nmax = 4;
    float amax;
    float max = qf_signed_absmax(x, 16, &amax);
    if (amax < 1e-15f) {
        QF_UNROLL
        for (int i = 0; i < 16; i++) levels[i] = 0;
        return 0.0f;
    }
    float iscale = -(float)nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    int q[16];
    QF_UNROLL
    for (int i = 0; i < 16; i++) {
        q[i] = qf_clamp(qf_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)q[i];
        suml2 += w * (float)q[i] * (float)q[i];
    }
    for (int pass = 0; pass < 5; pass++) {
        int n_changed = 0;
        QF_UNROLL
        for (int i = 0; i < 16; i++) {
            float v = x[i], w = v * v, li = (float)q[i];
            float slx = sumlx - w * v * li;
            if (slx > 0.0f) {
                float sl2 = suml2 - w * li * li;
                int new_l = qf_clamp(qf_nearest_int(v * sl2 / slx), -nmax, nmax - 1);
                if (new_l != q[i]) {
                    slx += w * v * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        q[i] = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (n_changed == 0) break;
    }
    QF_UNROLL
    for (int i = 0; i < 16; i++) levels[i] = (signed char)(q[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Six-bit (offset) scale levels in Q3_K's 12-byte layout.
__device__ void qf_pack_scales_q3(const int* l, qf_u8* packed) {
    for (int j = 0; j < 12; j++) packed[j] = 0;
    for (int j = 0; j < 16; j++) {
        if (j < 8) {
            packed[j] = (qf_u8)(l[j] & 0xf);
        } else {
            packed[j - 8] |= (qf_u8)((l[j] & 0xf) << 4);
        }
        packed[j % 4 + 8] |= (qf_u8)((l[j] >> 4) << (2 * (j / 4)));
    }
}

// The unweighted Q3_K block scales: six-bit levels of the group scales
// against the largest.
__device__ void qf_q3_k_block_scales(const float* scales, qf_u8* packed, float* block_d) {
    float amax;
    float max_scale = qf_signed_absmax(scales, 16, &amax);
    if (max_scale == 0.0f) {
        for (int j = 0; j < 12; j++) packed[j] = 0;
        *block_d = 0.0f;
        return;
    }
    float iscale = -32.0f / max_scale;
    int l[16];
    for (int j = 0; j < 16; j++) l[j] = qf_clamp((int)(signed char)qf_nearest_int(iscale * scales[j]), -32, 31) + 32;
    qf_pack_scales_q3(l, packed);
    *block_d = qf_f16_to_f32(qf_f32_to_f16(1.0f / iscale));
}

// With importance weights: make_qx_quants per group, and again over the
// group scales for the block's. A block covers 16 super-blocks, a thread a
// 16-value group, in the shape of Q4_K's.
QF_KERNEL(qf_encode_q3_k)(const void* source, void* destination, qf_u64 n_blocks, const float* importance,
                          qf_u64 n_per_row) {
    const int super_blocks = qf_searched_super_blocks(16);
    __shared__ float staged[QF_THREADS * 17], squares[super_blocks];
    __shared__ float scales[QF_THREADS], group_weight[QF_THREADS];
    __shared__ signed char levels[super_blocks * QK_K];
    __shared__ qf_u8 packed[super_blocks][12];
    __shared__ float block_d[super_blocks];
    int t = threadIdx.x;
    qf_u64 first_block = (qf_u64)blockIdx.x * super_blocks;
    qf_stage_groups<16>((const float*)source, first_block * QK_K, n_blocks * QK_K, staged);
    float x[16];
    qf_own_group<16>(staged, x);
    if (importance) {
        float w[16];
        qf_staged_sums_of_squares<16>(staged, squares);
        float sigma2 = 2.0f * squares[t / 16] / 256.0f;
        group_weight[t] = qf_group_weights<16>(x, importance, first_block * QK_K + 16 * t, n_per_row, sigma2, w);
        scales[t] = qf_make_qx<16>(x, w, 4, levels + 16 * t);
    } else {
        scales[t] = qf_make_q3(x, levels + 16 * t);
    }
    __syncthreads();
    if (t < super_blocks) {
        if (importance) {
            signed char ls[16];
            int l[16];
            float d_block = qf_make_qx<16>(scales + 16 * t, group_weight + 16 * t, 32, ls);
            for (int j = 0; j < 16; j++) l[j] = ls[j];
            qf_pack_scales_q3(l, packed[t]);
            block_d[t] = qf_f16_to_f32(qf_f32_to_f16(d_block));
        } else {
            qf_q3_k_block_scales(scales + 16 * t, packed[t], &block_d[t]);
        }
    }
    __syncthreads();
    {
        int block = t / 16, j = t % 16;
        const qf_u8* p = packed[block];
        int low = j < 8 ? (p[j] & 0xf) : (p[j - 8] >> 4);
        int high = (p[8 + j % 4] >> (2 * (j / 4))) & 3;
        float d = block_d[block] * (float)((int)(signed char)(qf_u8)(low | (high << 4)) - 32);
        if (d != 0.0f) {
            QF_UNROLL
            for (int i = 0; i < 16; i++) {
                levels[16 * t + i] = (signed char)(qf_clamp(qf_nearest_int(x[i] / d), -4, 3) + 4);
            }
        }
    }
    __syncthreads();
    qf_u8* out = (qf_u8*)destination + first_block * 110;
    for (int k = t; k < super_blocks * 110; k += QF_THREADS) {
        int block = k / 110, b = k % 110;
        if (first_block + block >= n_blocks) break;
        const qf_u8* l = (const qf_u8*)levels + QK_K * block;
        qf_u8 byte;
        if (b < 32) {
            // The high bits: bit i of byte b is level b + 32i's.
            byte = 0;
            for (int i = 0; i < 8; i++) {
                if (l[b + 32 * i] > 3) byte |= (qf_u8)(1 << i);
            }
        } else if (b < 96) {
            byte = qf_2bit_byte(l, b - 32);
        } else if (b < 108) {
            byte = packed[block][b - 96];
        } else {
            qf_u16 d = qf_f32_to_f16(block_d[block]);
            byte = qf_u16_pair_byte(d, d, b - 108);
        }
        out[k] = byte;
    }
}

// ---------------------------------------------------------------- Q8_K

QF_KERNEL(qf_decode_q8_k)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    qf_u64 block = blockIdx.x;
    if (block >= n_blocks) return;
    const qf_u8* b = (const qf_u8*)source + block * 292;
    qf_u32 bits = (qf_u32)b[0] | ((qf_u32)b[1] << 8) | ((qf_u32)b[2] << 16) | ((qf_u32)b[3] << 24);
    ((float*)destination)[block * QK_K + threadIdx.x] = __uint_as_float(bits) * (float)(signed char)b[4 + threadIdx.x];
}
