// The scale searches several kernels share (src/codecs/search.rs), each
// run by one thread over one group, in the scalar order.

// One make_qkx trial: the group's levels at iscale against min (into l)
// and their weighted sums, rounding in floats when Exact.
template <int N, int Unroll, bool Exact>
__device__ __forceinline__ void qf_qkx_trial(const float* x, const float* w, float iscale, float min, int nmax,
                                             float* l, float* sum_l, float* sum_l2, float* sum_xl) {
    float sl = 0.0f, sl2 = 0.0f, sxl = 0.0f;
    QF_UNROLL_BY(Unroll)
    for (int i = 0; i < N; i++) {
        l[i] = qf_level<Exact>(iscale * (x[i] - min), 0, nmax);
        sl += w[i] * l[i];
        sl2 += w[i] * l[i] * l[i];
        sxl += w[i] * l[i] * x[i];
    }
    *sum_l = sl;
    *sum_l2 = sl2;
    *sum_xl = sxl;
}

// make_qkx2_quants (or, with qkx3, make_qkx3_quants, whose flat-group test
// differs) on one group of N (16 or 32), as search.rs runs it. Its trials
// are not independent — a better trial moves the minimum every later trial
// rounds against — so one thread runs a group's search in order. Its loops
// unroll, so a group a thread holds in arrays stays in its registers; with
// Unroll 1 (a group in shared memory, searched by few of a block's
// threads) they do not, and the kernel keeps its few registers. A trial
// rounds in floats when its products at the group's lowest and highest
// value are below 2^22 (the rounding is monotonic, so all are); a moved
// minimum can put them past it, and then it rounds as ggml does. The best
// trial's levels are remade once, from the scale and minimum it rounded
// with. Writes the group's levels; returns (scale, -min).
template <int N, int Unroll = N>
__device__ __forceinline__ void qf_make_qkx(const float* x, const float* w, int nmax, float rmin, float rdelta,
                                            int nstep, bool use_mad, bool qkx3, qf_u8* levels, float* scale_out,
                                            float* neg_min_out) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    QF_UNROLL_BY(Unroll)
    for (int i = 1; i < N; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    float lowest = min;
    if (min > 0.0f) min = 0.0f;
    if (qkx3 ? max <= min : max == min) {
        QF_UNROLL_BY(Unroll)
        for (int i = 0; i < N; i++) levels[i] = 0;
        *scale_out = 0.0f;
        *neg_min_out = -min;
        return;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1.0f / iscale, best_error = 0.0f;
    float best_iscale = iscale, best_rounding_min = min;
    QF_UNROLL_BY(Unroll)
    for (int i = 0; i < N; i++) {
        float diff = scale * qf_level<false>(iscale * (x[i] - min), 0, nmax) + min - x[i];
        best_error += w[i] * (use_mad ? fabsf(diff) : diff * diff);
    }
    float aux[N];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l, sum_l2, sum_xl;
        if (qf_rounds_exactly(iscale * (lowest - min), iscale * (max - min))) {
            qf_qkx_trial<N, Unroll, true>(x, w, iscale, min, nmax, aux, &sum_l, &sum_l2, &sum_xl);
        } else {
            qf_qkx_trial<N, Unroll, false>(x, w, iscale, min, nmax, aux, &sum_l, &sum_l2, &sum_xl);
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
            QF_UNROLL_BY(Unroll)
            for (int i = 0; i < N; i++) {
                float diff = this_scale * aux[i] + this_min - x[i];
                error = error + w[i] * (use_mad ? fabsf(diff) : diff * diff);
            }
            if (error < best_error) {
                best_error = error;
                scale = this_scale;
                best_iscale = iscale;
                best_rounding_min = min;
                min = this_min;
            }
        }
    }
    QF_UNROLL_BY(Unroll)
    for (int i = 0; i < N; i++) {
        levels[i] = (qf_u8)qf_level<false>(best_iscale * (x[i] - best_rounding_min), 0, nmax);
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

// make_qx_quants with given weights on one group of N: symmetric levels in
// [0, 2·nmax) (all 0 for a group of zeros), remade once from the best
// trial's scale; returns the scale. Unroll as qf_make_qkx's. It always
// rounds in floats: a trial's |iscale| is at most (nmax + 0.9) / amax, so
// no |iscale · x| reaches nmax + 1, far below 2^22.
template <int N, int Unroll = N>
__device__ __forceinline__ float qf_make_qx(const float* x, const float* w, int nmax, signed char* levels) {
    float amax;
    float max = qf_signed_absmax(x, N, &amax);
    if (amax < 1e-15f) {
        QF_UNROLL_BY(Unroll)
        for (int i = 0; i < N; i++) levels[i] = 0;
        return 0.0f;
    }
    float scale = 0.0f, best = 0.0f, best_iscale = 0.0f;
    for (int trial = 0; trial < QX_TRIALS; trial++) {
        float iscale = qf_qx_iscale(trial, max, nmax);
        float sumlx = 0.0f, suml2 = 0.0f;
        QF_UNROLL_BY(Unroll)
        for (int i = 0; i < N; i++) {
            float l = qf_level<true>(iscale * x[i], -nmax, nmax - 1);
            sumlx += w[i] * x[i] * l;
            suml2 += w[i] * l * l;
        }
        bool better = trial == 0 || (suml2 > 0.0f && sumlx * sumlx > best * suml2);
        if (!better) continue;
        best_iscale = iscale;
        scale = trial == 0 ? (suml2 != 0.0f ? sumlx / suml2 : 0.0f) : sumlx / suml2;
        best = scale * sumlx;
    }
    QF_UNROLL_BY(Unroll)
    for (int i = 0; i < N; i++) {
        levels[i] = (signed char)((int)qf_level<true>(best_iscale * x[i], -nmax, nmax - 1) + nmax);
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

// Encoders whose searches run a thread a group: a block covers the
// super-blocks whose groups of N make one per thread
// (searched_super_blocks in kernels.rs), so every thread searches.
__device__ __forceinline__ constexpr int qf_searched_super_blocks(int n) { return QF_THREADS * n / QK_K; }

// Stages the block's groups in shared memory: values first … first +
// QF_THREADS·N of the n, each group of N values N + 1 floats from the last,
// so threads reading their own groups side by side hit different banks;
// zeros past the end.
template <int N>
__device__ void qf_stage_groups(const float* source, qf_u64 first, qf_u64 n, float* staged) {
    for (int k = threadIdx.x; k < QF_THREADS * N; k += QF_THREADS) {
        staged[(N + 1) * (k / N) + k % N] = first + k < n ? source[first + k] : 0.0f;
    }
    __syncthreads();
}

// This thread's group, from the staged block into `x` (its registers).
template <int N>
__device__ __forceinline__ void qf_own_group(const float* staged, float* x) {
    QF_UNROLL
    for (int i = 0; i < N; i++) x[i] = staged[(N + 1) * threadIdx.x + i];
}

// Each staged super-block's sum of squares, in the scalar order, by a
// thread a super-block (each codec makes its σ² of it its own way).
template <int N>
__device__ void qf_staged_sums_of_squares(const float* staged, float* sums) {
    int t = threadIdx.x;
    if (t < qf_searched_super_blocks(N)) {
        float s = 0.0f;
        for (int i = 0; i < QK_K; i++) {
            float v = staged[(N + 1) * (QK_K / N * t + i / N) + i % N];
            s = s + v * v;
        }
        sums[t] = s;
    }
    __syncthreads();
}

// A group's importance weights qw · sqrt(σ² + x²), its first value the
// row's element `first`; returns their sum, in order.
template <int N>
__device__ __forceinline__ float qf_group_weights(const float* x, const float* importance, qf_u64 first,
                                                  qf_u64 n_per_row, float sigma2, float* w) {
    float sum = 0.0f;
    QF_UNROLL
    for (int i = 0; i < N; i++) {
        w[i] = importance[(first + i) % n_per_row] * sqrtf(sigma2 + x[i] * x[i]);
        sum = sum + w[i];
    }
    return sum;
}
