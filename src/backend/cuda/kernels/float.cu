// F32, F16 and BF16 to and from f32, and F64 to f32, a thread an element.

__device__ __forceinline__ qf_u64 qf_element() { return (qf_u64)blockIdx.x * QF_THREADS + threadIdx.x; }

QF_KERNEL(qf_decode_f16)(const void* source, void* destination, qf_u64 n, const float*, qf_u64) {
    qf_u64 i = qf_element();
    if (i < n) ((float*)destination)[i] = qf_f16_to_f32(qf_load_u16((const qf_u8*)source + 2 * i));
}

QF_KERNEL(qf_decode_bf16)(const void* source, void* destination, qf_u64 n, const float*, qf_u64) {
    qf_u64 i = qf_element();
    if (i < n) ((float*)destination)[i] = qf_bf16_to_f32(qf_load_u16((const qf_u8*)source + 2 * i));
}

// Rounded to nearest even, as `f64 as f32`; a NaN as x86's cvtsd2ss makes
// it (quiet, the top of its payload kept), where a GPU's conversion would
// give its canonical NaN.
QF_KERNEL(qf_decode_f64)(const void* source, void* destination, qf_u64 n, const float*, qf_u64) {
    qf_u64 i = qf_element();
    if (i >= n) return;
    const qf_u8* p = (const qf_u8*)source + 8 * i;
    qf_u64 bits = 0;
    for (int k = 7; k >= 0; k--) bits = (bits << 8) | p[k];
    bool nan = (bits & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    ((float*)destination)[i] = nan ? __uint_as_float((qf_u32)(bits >> 32 & 0x80000000u) | 0x7fc00000u |
                                                     (qf_u32)((bits & 0x000fffffffffffffull) >> 29))
                                   : (float)__longlong_as_double((long long)bits);
}

QF_KERNEL(qf_copy_f32)(const void* source, void* destination, qf_u64 n, const float*, qf_u64) {
    qf_u64 i = qf_element();
    if (i < n) ((float*)destination)[i] = ((const float*)source)[i];
}

QF_KERNEL(qf_encode_f16)(const void* source, void* destination, qf_u64 n, const float*, qf_u64) {
    qf_u64 i = qf_element();
    if (i < n) qf_store_u16((qf_u8*)destination + 2 * i, qf_f32_to_f16(((const float*)source)[i]));
}

QF_KERNEL(qf_encode_bf16)(const void* source, void* destination, qf_u64 n, const float*, qf_u64) {
    qf_u64 i = qf_element();
    if (i < n) qf_store_u16((qf_u8*)destination + 2 * i, qf_f32_to_bf16(((const float*)source)[i]));
}

// The first element that is NaN or infinite (its index into *first, kept
// least by an atomic minimum; the caller sets it to n first).
QF_KERNEL(qf_find_non_finite)(const void* source, void* first, qf_u64 n, const float*, qf_u64) {
    qf_u64 i = qf_element();
    if (i < n && (__float_as_uint(((const float*)source)[i]) & 0x7f800000u) == 0x7f800000u) {
        atomicMin((qf_u64*)first, i);
    }
}
