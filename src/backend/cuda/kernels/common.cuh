// The scalar rules every kernel shares with src/codecs/scalar.rs and
// src/codecs/blocks.rs, bit for bit: ggml's software f16 and bf16
// conversions, C's float-to-int cast as x86-64 computes it, the guarded
// inverse. Compiled with --fmad=false (and -ffp-contract=off on the host),
// so every multiply and add rounds where the Rust does.
//
// Every kernel has one signature, (source, destination, item count), and a
// grid of 256-thread blocks; the Rust table in kernels.rs says how many
// items a block covers.

#define QF_THREADS 256
#define QK 32
#define QK_K 256

// Loops over a group's values unroll on the GPU, so the arrays they index
// stay in registers; QF_UNROLL_BY(n) unrolls n times, 1 not at all (the
// host emulation defines both empty).
#ifndef QF_UNROLL
#define QF_PRAGMA(text) _Pragma(#text)
#define QF_UNROLL QF_PRAGMA(unroll)
#define QF_UNROLL_BY(n) QF_PRAGMA(unroll(n))
#endif

typedef unsigned char qf_u8;
typedef unsigned short qf_u16;
typedef unsigned int qf_u32;
typedef unsigned long long qf_u64;

__device__ __forceinline__ float qf_inverse(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

// ggml's nearest_int: round half to even through the 1.5 × 2^23 trick.
__device__ __forceinline__ int qf_nearest_int(float x) {
    float v = x + 12582912.0f;
    return (int)(__float_as_uint(v) & 0x007fffffu) - 0x00400000;
}

__device__ __forceinline__ int qf_clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// nearest_int(x) as a float where that is round half to even, |x| < 2^22:
// two additions and no conversion (a GPU converts between int and float at
// an eighth of its float rate), for the searches' levels.
__device__ __forceinline__ float qf_round_even(float x) { return (x + 12582912.0f) - 12582912.0f; }

// Whether qf_round_even is nearest_int for every value between a and b
// (false for NaN).
__device__ __forceinline__ bool qf_rounds_exactly(float a, float b) {
    return fabsf(a) < 4194304.0f && fabsf(b) < 4194304.0f;
}

// nearest_int(x) clamped to [lo, hi], as a float; Exact when qf_round_even
// is nearest_int there.
template <bool Exact>
__device__ __forceinline__ float qf_level(float x, int lo, int hi) {
    if (Exact) return fminf(fmaxf(qf_round_even(x), (float)lo), (float)hi);
    return (float)qf_clamp(qf_nearest_int(x), lo, hi);
}

// (int)x as cvttss2si computes it: INT_MIN for NaN and out-of-range values
// (a GPU cast saturates instead).
__device__ __forceinline__ int qf_float_to_int(float x) {
    return (x >= -2147483648.0f && x < 2147483648.0f) ? (int)x : (int)0x80000000u;
}

__device__ __forceinline__ float qf_f16_to_f32(qf_u16 h) {
    qf_u32 sign = (qf_u32)(h & 0x8000u) << 16;
    qf_u32 exponent = (h >> 10) & 0x1fu;
    qf_u32 mantissa = h & 0x3ffu;
    if (exponent == 0x1fu) {
        // An infinity, or a NaN made quiet with its payload kept (as F16C does).
        return __uint_as_float(sign | (mantissa != 0 ? 0x7fc00000u : 0x7f800000u) | (mantissa << 13));
    }
    if (exponent != 0) {
        return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    }
    // A subnormal (or zero): mantissa × 2^-24, exact in f32.
    float magnitude = (float)mantissa * 5.9604644775390625e-8f;
    return __uint_as_float(sign | __float_as_uint(magnitude));
}

// ggml's GGML_FP32_TO_FP16: round to nearest even; NaN becomes 0x7e00 with
// the input's sign.
__device__ __forceinline__ qf_u16 qf_f32_to_f16(float f) {
    float base = (fabsf(f) * __uint_as_float(0x77800000u)) * __uint_as_float(0x08800000u);
    qf_u32 w = __float_as_uint(f);
    qf_u32 shl1_w = w + w;
    qf_u32 sign = w & 0x80000000u;
    qf_u32 bias = shl1_w & 0xff000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = base + __uint_as_float((bias >> 1) + 0x07800000u);
    qf_u32 bits = __float_as_uint(base);
    qf_u32 exp_bits = (bits >> 13) & 0x00007c00u;
    qf_u32 mantissa_bits = bits & 0x00000fffu;
    qf_u32 nonsign = exp_bits + mantissa_bits;
    return (qf_u16)((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}

__device__ __forceinline__ float qf_bf16_to_f32(qf_u16 h) { return __uint_as_float((qf_u32)h << 16); }

// ggml's GGML_FP32_TO_BF16: round to nearest even; NaN kept, made quiet.
__device__ __forceinline__ qf_u16 qf_f32_to_bf16(float f) {
    qf_u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (qf_u16)((u >> 16) | 64u);
    return (qf_u16)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

__device__ __forceinline__ qf_u16 qf_load_u16(const qf_u8* p) { return (qf_u16)(p[0] | (p[1] << 8)); }

__device__ __forceinline__ void qf_store_u16(qf_u8* p, qf_u16 v) {
    p[0] = (qf_u8)(v & 0xffu);
    p[1] = (qf_u8)(v >> 8);
}

// Byte b (< 4) of two u16 values stored one after the other, little-endian.
__device__ __forceinline__ qf_u8 qf_u16_pair_byte(qf_u16 first, qf_u16 second, int b) {
    qf_u16 half = b < 2 ? first : second;
    return (qf_u8)(b % 2 == 0 ? half & 0xffu : half >> 8);
}

// Which of two candidates a block-wide reduction keeps: the larger key, the
// earlier index among equals (the sequential scan's first).
__device__ __forceinline__ bool qf_wins(float key, int index, float other_key, int other_index) {
    return other_key > key || (other_key == key && other_index < index);
}

// The value of largest magnitude among n (the first of equals; 0 when all
// are zero) and that magnitude: the scalar scan of search.rs.
__device__ __forceinline__ float qf_signed_absmax(const float* x, int n, float* magnitude) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    *magnitude = amax;
    return max;
}

// The largest of n values and 0 (ggml's MAX fold from 0).
__device__ __forceinline__ float qf_largest(const float* x, int n) {
    float m = 0.0f;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

