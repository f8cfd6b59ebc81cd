// F32, F16 and BF16 to and from f32, a thread an element.

__device__ __forceinline__ qf_u64 qf_element() { return (qf_u64)blockIdx.x * QF_THREADS + threadIdx.x; }

QF_KERNEL(qf_decode_f16)(const void* source, void* destination, qf_u64 n, const float*, qf_u64) {
    qf_u64 i = qf_element();
    if (i < n) ((float*)destination)[i] = qf_f16_to_f32(qf_load_u16((const qf_u8*)source + 2 * i));
}

QF_KERNEL(qf_decode_bf16)(const void* source, void* destination, qf_u64 n, const float*, qf_u64) {
    qf_u64 i = qf_element();
    if (i < n) ((float*)destination)[i] = qf_bf16_to_f32(qf_load_u16((const qf_u8*)source + 2 * i));
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
