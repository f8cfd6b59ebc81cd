// The scale searches several kernels share (src/codecs/search.rs), each
// run by one thread over one group, in the scalar order.

// make_qkx2_quants (or, with qkx3, make_qkx3_quants, whose flat-group test
// differs) on one group of n (16 or 32), as search.rs runs it. Its trials
// are not independent — a better trial moves the minimum every later trial
// rounds against — so one thread runs a group's search in order. Writes the
// group's levels; returns (scale, -min).
__device__ void qf_make_qkx(const float* x, const float* w, int n, int nmax, float rmin, float rdelta, int nstep,
                            bool use_mad, bool qkx3, qf_u8* levels, float* scale_out, float* neg_min_out) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0.0f) min = 0.0f;
    if (qkx3 ? max <= min : max == min) {
        for (int i = 0; i < n; i++) levels[i] = 0;
        *scale_out = 0.0f;
        *neg_min_out = -min;
        return;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1.0f / iscale, best_error = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = qf_clamp(qf_nearest_int(iscale * (x[i] - min)), 0, nmax);
        levels[i] = (qf_u8)l;
        float diff = scale * (float)l + min - x[i];
        best_error += w[i] * (use_mad ? fabsf(diff) : diff * diff);
    }
    qf_u8 aux[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; i++) {
            aux[i] = (qf_u8)qf_clamp(qf_nearest_int(iscale * (x[i] - min)), 0, nmax);
            float l = (float)aux[i];
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float det = sum_w * sum_l2 - sum_l * sum_l;
        if (det > 0.0f) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if (this_min > 0.0f) {
                this_min = 0.0f;
                this_scale = sum_xl / sum_l2;
            }
            float error = 0.0f;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)aux[i] + this_min - x[i];
                error = error + w[i] * (use_mad ? fabsf(diff) : diff * diff);
            }
            if (error < best_error) {
                for (int i = 0; i < n; i++) levels[i] = aux[i];
                best_error = error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *scale_out = scale;
    *neg_min_out = -min;
}

#define QX_TRIALS 19

// make_qx_quants' trial t: 0 the first guess, then is = -9 … -1, 1 … 9.
__device__ __forceinline__ float qf_qx_iscale(int t, float max, int nmax) {
    if (t == 0) return -(float)nmax / max;
    int is = t <= 9 ? t - 10 : t - 9;
    return -((float)nmax + 0.1f * (float)is) / max;
}

// make_qx_quants with given weights on one group of n: symmetric levels in
// [0, 2·nmax) (all 0 for a group of zeros); returns the scale.
__device__ float qf_make_qx(const float* x, const float* w, int n, int nmax, signed char* levels) {
    float amax;
    float max = qf_signed_absmax(x, n, &amax);
    if (amax < 1e-15f) {
        for (int i = 0; i < n; i++) levels[i] = 0;
        return 0.0f;
    }
    float scale = 0.0f, best = 0.0f;
    for (int trial = 0; trial < QX_TRIALS; trial++) {
        float iscale = qf_qx_iscale(trial, max, nmax);
        float sumlx = 0.0f, suml2 = 0.0f;
        for (int i = 0; i < n; i++) {
            float l = (float)qf_clamp(qf_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            sumlx += w[i] * x[i] * l;
            suml2 += w[i] * l * l;
        }
        bool better = trial == 0 || (suml2 > 0.0f && sumlx * sumlx > best * suml2);
        if (!better) continue;
        for (int i = 0; i < n; i++) {
            levels[i] = (signed char)(qf_clamp(qf_nearest_int(iscale * x[i]), -nmax, nmax - 1) + nmax);
        }
        scale = trial == 0 ? (suml2 != 0.0f ? sumlx / suml2 : 0.0f) : sumlx / suml2;
        best = scale * sumlx;
    }
    return scale;
}

// make_qp_quants: positive values (a block's scales or minimums) to levels in
// [0, nmax] under weights, with its trial scales and coordinate descent;
// returns the levels' scale.
__device__ float qf_make_qp(int n, int nmax, const float* x, const float* w, qf_u8* levels) {
    float max = 0.0f;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max < 1e-15f) {
        for (int i = 0; i < n; i++) levels[i] = 0;
        return 0.0f;
    }
    float iscale = (float)nmax / max;
    float scale = 1.0f / iscale, best_mse = 0.0f;
    for (int i = 0; i < n; i++) {
        float diff = x[i] - scale * (float)(qf_u8)qf_nearest_int(iscale * x[i]);
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        float iscale_is = (0.1f * (float)is + (float)nmax) / max;
        float scale_is = 1.0f / iscale_is, mse = 0.0f;
        for (int i = 0; i < n; i++) {
            int l = qf_nearest_int(iscale_is * x[i]);
            float diff = x[i] - scale_is * (float)(l < nmax ? l : nmax);
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = qf_nearest_int(iscale * x[i]);
        l = l < nmax ? l : nmax;
        levels[i] = (qf_u8)l;
        sumlx += w[i] * x[i] * (float)l;
        suml2 += w[i] * (float)l * (float)l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float li = (float)levels[i];
            float slx = sumlx - w[i] * x[i] * li;
            float sl2 = suml2 - w[i] * li * li;
            if (slx > 0.0f && sl2 > 0.0f) {
                int new_l = qf_nearest_int(x[i] * sl2 / slx);
                new_l = new_l < nmax ? new_l : nmax;
                if (new_l != (int)levels[i]) {
                    slx += w[i] * x[i] * (float)new_l;
                    sl2 += w[i] * (float)new_l * (float)new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        levels[i] = (qf_u8)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (n_changed == 0) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// A super-block's importance weights qw · sqrt(σ² + x²) (σ² the mean
// square times `scale`: 2 for Q3_K…Q5_K, 1 for Q2_K) and each group's sum
// of them (groups of `group`), for the block's 256 values in shared memory.
__device__ void qf_super_block_weights(const float* x, const float* importance, qf_u64 first, qf_u64 n_per_row,
                                       float scale, int group, float* w, float* group_weight) {
    __shared__ float sigma2;
    int t = threadIdx.x;
    if (t == 0) {
        float s = 0.0f;
        for (int i = 0; i < 256; i++) s = s + x[i] * x[i];
        sigma2 = scale * s / 256.0f;
    }
    __syncthreads();
    w[t] = importance[(first + t) % n_per_row] * sqrtf(sigma2 + x[t] * x[t]);
    __syncthreads();
    if (t < 256 / group) {
        float s = 0.0f;
        for (int i = 0; i < group; i++) s = s + w[group * t + i];
        group_weight[t] = s;
    }
    __syncthreads();
}
