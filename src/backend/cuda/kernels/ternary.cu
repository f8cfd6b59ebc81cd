// TQ1_0 and TQ2_0 decode, as src/codecs/ternary.rs defines them: 256
// values of {-1, 0, 1} times an f16 scale; a block of 256 threads a
// super-block, a thread a value.

// The trit TQ1_0 byte `byte` holds at position n (0 the most significant):
// multiplying by 3^n (mod 256) shifts the base-3 fraction.
__device__ __forceinline__ int qf_tq1_trit(qf_u8 byte, int n) {
    const qf_u8 pow3[5] = {1, 3, 9, 27, 81};
    qf_u8 q = (qf_u8)(byte * pow3[n]);
    return (int)(((qf_u32)q * 3u) >> 8) - 1;
}

// 48 bytes of five trits (a run of 32 bytes, then 16: byte m of a run holds
// values m + n·run), 4 of four trits, the scale.
QF_KERNEL(qf_decode_tq1_0)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    qf_u64 block = blockIdx.x;
    if (block >= n_blocks) return;
    const qf_u8* b = (const qf_u8*)source + block * 54;
    int e = threadIdx.x;
    qf_u8 byte;
    int n;
    if (e < 160) {
        byte = b[e % 32];
        n = e / 32;
    } else if (e < 240) {
        byte = b[32 + (e - 160) % 16];
        n = (e - 160) / 16;
    } else {
        byte = b[48 + (e - 240) % 4];
        n = (e - 240) / 4;
    }
    ((float*)destination)[block * QK_K + e] = (float)qf_tq1_trit(byte, n) * qf_f16_to_f32(qf_load_u16(b + 52));
}

QF_KERNEL(qf_decode_tq2_0)(const void* source, void* destination, qf_u64 n_blocks, const float*, qf_u64) {
    qf_u64 block = blockIdx.x;
    if (block >= n_blocks) return;
    const qf_u8* b = (const qf_u8*)source + block * 66;
    int e = threadIdx.x, chunk = e / 128, l = (e % 128) / 32, m = e % 32;
    int q = (b[32 * chunk + m] >> (2 * l)) & 3;
    ((float*)destination)[block * QK_K + e] = (float)(q - 1) * qf_f16_to_f32(qf_load_u16(b + 64));
}
