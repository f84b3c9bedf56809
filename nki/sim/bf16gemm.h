/* Shared by bf16gemm.c (probe, guard, dispatch, the AVX-512 BF16 kernel) and bf16amx.c
 * (the AMX kernel): status codes, unit kinds, the guard's scan step, the AMX kernel's entry. */
#ifndef NKI_BF16GEMM_H
#define NKI_BF16GEMM_H
#include <immintrin.h>
#include <stdint.h>

#define NKI_BGEMM_DONE 0
#define NKI_BGEMM_REFUSED 1
#define NKI_BGEMM_NO_UNIT 2

enum { UNIT_NONE = 0, UNIT_AVX512_BF16 = 1, UNIT_AMX_BF16 = 2 };

/* The guard (bf16gemm.c): biased exponents of an operand's non-zero elements, and whether it
 * holds a subnormal, inf or NaN. */
typedef struct { int lo, hi, bad; } expo_range;
#define EXPO_EMPTY ((expo_range){255, 0, 0})
int operands_safe(const expo_range *a, const expo_range *b);

/* A scan in progress: per-lane min/max exponent fields (bits 7..14 in place), bad lanes. */
typedef struct { __m512i lo, hi; __mmask32 bad; } scan_state;

__attribute__((target("avx512f,avx512bw"), always_inline))
static inline scan_state scan_start(void) {
    return (scan_state){_mm512_set1_epi16(0x7F80), _mm512_setzero_si512(), 0};
}

/* One vector of the scan: bad |= subnormal or inf/NaN lanes; lo/hi over the non-zero lanes
 * of m. */
__attribute__((target("avx512f,avx512bw"), always_inline))
static inline void scan_vector(__m512i v, __mmask32 m, scan_state *st) {
    const __m512i emask = _mm512_set1_epi16(0x7F80), mmask = _mm512_set1_epi16(0x007F);
    __m512i e = _mm512_and_si512(v, emask);
    __mmask32 zero_e = _mm512_testn_epi16_mask(e, e);
    st->bad |= (zero_e & _mm512_test_epi16_mask(v, mmask)) | _mm512_cmpeq_epi16_mask(e, emask);
    __mmask32 nz = m & ~zero_e;
    st->lo = _mm512_mask_min_epu16(st->lo, nz, st->lo, e);
    st->hi = _mm512_mask_max_epu16(st->hi, nz, st->hi, e);
}

/* Fold a scan's lanes into r. */
__attribute__((target("avx512f,avx512bw"), always_inline))
static inline void scan_finish(const scan_state *st, expo_range *r) {
    uint16_t l[32], h[32];
    _mm512_storeu_si512(l, st->lo);
    _mm512_storeu_si512(h, st->hi);
    for (int k = 0; k < 32; k++) {
        int a = l[k] >> 7, b = h[k] >> 7;
        if (a < r->lo) r->lo = a;
        if (b > r->hi) r->hi = b;
    }
    r->bad |= st->bad != 0;
}

int nki_bf16_unit(void);
/* ra: the guard's scan of A; B is scanned while packed (NKI_BGEMM_REFUSED: C untouched). */
int nki_amx_gemm(int64_t M, int64_t N, int64_t K, int64_t nseg, const uint16_t *a,
                 int64_t lda, int64_t a_step, const expo_range *ra, const uint16_t *b,
                 int64_t ldb, int64_t b_step, float *c, int64_t ldc, int accumulate);
#endif
