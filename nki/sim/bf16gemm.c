/* bf16 GEMM on the CPU's bf16 dot-product unit (AVX-512 BF16 `vdpbf16ps`), for nc_matmul.
 *
 * Built once per machine by nki/sim/bf16.py (gcc -O3, with bf16amx.c, the AMX kernel) and
 * called through the symbol `nki_bgemm`, as fp32 matmuls call `nki_sgemm`.
 *
 *   C[M, N] (+)= sum over segments s of  A_s[K, M]^T @ B_s[K, N]
 *
 * A_s, B_s are bf16 bit patterns (uint16) in rows of stride lda / ldb elements, segment s
 * starting a_step / b_step elements after segment s-1; C is fp32 with row stride ldc. One
 * segment is one nc_matmul instruction: its dot products start from +0 in the unit and are
 * then added to C with an ordinary IEEE fp32 add, so a folded chain of segments gives the very
 * bits of the same instructions run one at a time.
 *
 * The unit treats subnormal inputs as zero and flushes subnormal results (DAZ/FTZ, fixed
 * round-to-nearest-even, MXCSR not consulted). Our numerics keep subnormals, so the unit is
 * only used when it cannot see one (the guard, `operands_safe`): no subnormal, infinite or
 * NaN encodings in A or B, and exponent bounds over their non-zero elements such that every
 * product is a multiple of 2^-126 (then so is every partial sum, which is therefore 0 or
 * normal: nothing to flush) and no sum can overflow. Otherwise nki_bgemm returns
 * NKI_BGEMM_REFUSED without touching C and the caller takes the exact sgemm path.
 *
 * Order of the sums inside one segment (fixed, both backends call this same code): per
 * output element one fp32 accumulator; for each pair of rows (2p, 2p+1) one vdpbf16ps step
 * (the unit's own pair order and rounding, modelled in nki/sim/bf16_model.py); an odd K
 * pads the pair with a zero row.
 *
 * Dispatch: nki_bf16_units() lists the units found by CPUID and XCR0 (the OS must save
 * the ZMM and opmask state, and for AMX the tile state, which Linux grants a process only
 * after arch_prctl(ARCH_REQ_XCOMP_PERM): a refused request means no AMX, never a fault);
 * nki_bf16_unit() is the one in use, AMX where found (bf16amx.c), else AVX-512 BF16. A
 * machine without either gets NKI_BGEMM_NO_UNIT and never runs an AVX-512 instruction here.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "bf16gemm.h"

#define ARCH_REQ_XCOMP_PERM 0x1023   /* Linux, arch/x86/include/uapi/asm/prctl.h */
#define XFEATURE_XTILEDATA 18

#define MR 12   /* output rows per micro-tile (A broadcasts) */
#define NR 32   /* output columns per micro-tile (two zmm of fp32) */

static int units_found = -1;  /* bit k: unit kind k usable; -1: not probed yet */
static int unit_kind = UNIT_NONE;   /* the unit in use */
static int unit_enabled = 1;

static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* AMX-TILE and AMX-BF16 (CPUID 7.0 EDX bits 24, 22), the tile state enabled in XCR0 (bits
 * 17, 18), and this process allowed to use it (permission is per process, for all threads). */
static int amx_usable(uint32_t edx7, uint64_t xcr0) {
    if (!((edx7 >> 24) & 1) || !((edx7 >> 22) & 1) || (xcr0 & 0x60000) != 0x60000)
        return 0;
#ifdef __linux__
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return 0;
#endif
}

static int probe_units(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))   /* OSXSAVE */
        return 0;
    /* XCR0: SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM state enabled by the OS */
    uint64_t xcr0 = read_xcr0();
    if ((xcr0 & 0xE6) != 0xE6 || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    uint32_t edx7 = d;
    if (!((b >> 16) & 1) || !((b >> 30) & 1))   /* AVX512F, AVX512BW: the guard and the
                                                   packing are AVX-512 code on either unit */
        return 0;
    int found = 0;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1))   /* AVX512_BF16 */
        found |= 1 << UNIT_AVX512_BF16;
    if (amx_usable(edx7, xcr0))
        found |= 1 << UNIT_AMX_BF16;
    return found;
}

/* Bit k set: unit kind k (1 AVX-512 BF16, 2 AMX) is usable on this machine. */
int nki_bf16_units(void) {
    if (units_found < 0) {
        units_found = probe_units();
        unit_kind = (units_found >> UNIT_AMX_BF16) & 1      ? UNIT_AMX_BF16
                  : (units_found >> UNIT_AVX512_BF16) & 1 ? UNIT_AVX512_BF16 : UNIT_NONE;
    }
    return units_found;
}

/* The unit in use (0 none, 1 AVX-512 BF16, 2 AMX), whether or not it is enabled. */
int nki_bf16_unit(void) {
    nki_bf16_units();
    return unit_kind;
}

/* Use unit kind `kind` (one of nki_bf16_units()) from now on; returns the previous kind, or
 * -1 (nothing changed) when this machine has no such unit. */
int nki_bf16_select(int kind) {
    int found = nki_bf16_units(), was = unit_kind;
    if (kind <= 0 || kind > UNIT_AMX_BF16 || !((found >> kind) & 1))
        return -1;
    unit_kind = kind;
    return was;
}

/* Switch the unit off (0) or on (1) for this process; returns the previous setting. */
int nki_bf16_set_enabled(int on) {
    int was = unit_enabled;
    unit_enabled = on != 0;
    return was;
}

/* ----- the guard (its vector step is in bf16gemm.h) ----------------------------------- */
__attribute__((target("avx512f,avx512bw")))
static void scan_rows(const uint16_t *x, int64_t rows, int64_t cols, int64_t ld,
                      expo_range *r) {
    scan_state st = scan_start();
    int64_t full = cols / 32 * 32, w = cols - full;
    __mmask32 tail = (__mmask32)((1ull << w) - 1);
    for (int64_t i = 0; i < rows; i++) {
        const uint16_t *row = x + i * ld;
        for (int64_t j = 0; j < full; j += 32)
            scan_vector(_mm512_loadu_si512(row + j), 0xFFFFFFFFu, &st);
        if (w)
            scan_vector(_mm512_maskz_loadu_epi16(tail, row + full), tail, &st);
    }
    scan_finish(&st, r);
}

/* Products of normal bf16 values x = m 2^(e-7), y: multiples of 2^(ex+ey-14); they are
 * multiples of 2^-126 iff ex + ey >= -112, i.e. biased Ex + Ey >= 142. The upper bound keeps
 * every product below 2^102 and K-long sums finite. */
int operands_safe(const expo_range *a, const expo_range *b) {
    if (a->bad || b->bad)
        return 0;
    if (a->hi == 0 || b->hi == 0)   /* an all-zero operand: every product is +-0 */
        return 1;
    return a->lo + b->lo >= 142 && a->hi + b->hi <= 354;
}

/* ----- packing ------------------------------------------------------------------------ */
/* A_s[K, M] rows (2p, 2p+1) → per MR-column panel, per pair p, MR uint32 pairs (row 2p in
 * the low half); columns past M and the odd K's missing row are zero. */
static void pack_a(const uint16_t *a, int64_t lda, int64_t K, int64_t M, uint32_t *out) {
    int64_t kp = (K + 1) / 2;
    for (int64_t m0 = 0; m0 < M; m0 += MR) {
        uint32_t *panel = out + (m0 / MR) * kp * MR;
        for (int64_t p = 0; p < kp; p++) {
            const uint16_t *r0 = a + 2 * p * lda, *r1 = r0 + lda;
            for (int64_t i = 0; i < MR; i++) {
                int64_t m = m0 + i;
                uint32_t lo = m < M ? r0[m] : 0;
                uint32_t hi = (m < M && 2 * p + 1 < K) ? r1[m] : 0;
                panel[p * MR + i] = lo | (hi << 16);
            }
        }
    }
}

/* ----- the micro-kernel --------------------------------------------------------------- */
/* B's block of NR columns n0.. (w of them) for one segment, rows (2p, 2p+1) interleaved
 * into two zmm per pair (unpack: columns 8j+{0..3} in the first, 8j+{4..7} in the second,
 * lane group j), contiguous, so the row panels that reuse it read it from L1 without
 * walking K rows a partition pitch apart; the odd K's missing row is zero. */
__attribute__((target("avx512f,avx512bw"), always_inline))
static inline void pack_b(const uint16_t *b, int64_t ldb, int64_t K, int64_t w, __m512i *bp) {
    __mmask32 bm = w >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << w) - 1);
    int64_t kp = (K + 1) / 2;
    for (int64_t p = 0; p < kp; p++) {
        __m512i r0 = _mm512_maskz_loadu_epi16(bm, b + 2 * p * ldb);
        __m512i r1 = 2 * p + 1 < K ? _mm512_maskz_loadu_epi16(bm, b + (2 * p + 1) * ldb)
                                   : _mm512_setzero_si512();
        _mm512_store_si512(bp + 2 * p, _mm512_unpacklo_epi16(r0, r1));
        _mm512_store_si512(bp + 2 * p + 1, _mm512_unpackhi_epi16(r0, r1));
    }
}

/* t[i][0..1] = sum over pairs of the A panel's row i times the packed B block, in the
 * unit, one vdpbf16ps per pair and half. */
__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline))
static inline void micro(const uint32_t *ap, const __m512i *bp, int64_t kp, int mr,
                         __m512 t[MR][2]) {
    for (int i = 0; i < MR; i++)
        t[i][0] = t[i][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kp; p++) {
        __m512bh lo = (__m512bh)_mm512_load_si512(bp + 2 * p);
        __m512bh hi = (__m512bh)_mm512_load_si512(bp + 2 * p + 1);
        const uint32_t *ar = ap + p * MR;
        for (int i = 0; i < mr; i++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)ar[i]);
            t[i][0] = _mm512_dpbf16_ps(t[i][0], av, lo);
            t[i][1] = _mm512_dpbf16_ps(t[i][1], av, hi);
        }
    }
}

/* Add (or store, when !acc) the micro-tile t into C rows m0.., columns n0.. (w of them). */
__attribute__((target("avx512f,avx512bw"), always_inline))
static inline void store_tile(float *c, int64_t ldc, int mr, int64_t w, int acc,
                              __m512 t[MR][2]) {
    /* lane l of the result: column l of 0..15 comes from lo[4j+r] (r < 4) or hi[4j+r-4] */
    const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19,
                                            4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27,
                                             12, 13, 14, 15, 28, 29, 30, 31);
    __mmask16 m0 = w >= 16 ? 0xFFFF : (__mmask16)((1u << w) - 1);
    __mmask16 m1 = w >= 32 ? 0xFFFF : (w <= 16 ? 0 : (__mmask16)((1u << (w - 16)) - 1));
    for (int i = 0; i < mr; i++) {
        float *row = c + i * ldc;
        __m512 v0 = _mm512_permutex2var_ps(t[i][0], first, t[i][1]);
        __m512 v1 = _mm512_permutex2var_ps(t[i][0], second, t[i][1]);
        if (acc) {
            v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, row), v0);
            v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, row + 16), v1);
        }
        _mm512_mask_storeu_ps(row, m0, v0);
        _mm512_mask_storeu_ps(row + 16, m1, v1);
    }
}

__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline))
static inline void tile(const uint32_t *ap, const __m512i *bp, int64_t kp, int64_t w,
                        float *c, int64_t ldc, int mr, int add) {
    __m512 t[MR][2];
    micro(ap, bp, kp, mr, t);
    store_tile(c, ldc, mr, w, add, t);
}

/* Loop order: NR-column blocks, then segments (the C strip, M x NR fp32, stays in L1/L2
 * across a folded chain), then MR-row panels over one packed B block. */
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static void run_unit(int64_t M, int64_t N, int64_t K, int64_t nseg, const uint32_t *apack,
                     const uint16_t *b, int64_t ldb, int64_t b_step, float *c, int64_t ldc,
                     int accumulate, __m512i *bp) {
    int64_t kp = (K + 1) / 2, panels = (M + MR - 1) / MR;
    for (int64_t n0 = 0; n0 < N; n0 += NR) {
        int64_t w = N - n0 < NR ? N - n0 : NR;
        for (int64_t s = 0; s < nseg; s++) {
            pack_b(b + s * b_step + n0, ldb, K, w, bp);
            const uint32_t *as = apack + s * panels * kp * MR;
            float *cb = c + n0;
            int add = accumulate || s > 0;
            int64_t m0 = 0;
            for (; m0 + MR <= M; m0 += MR)
                tile(as + (m0 / MR) * kp * MR, bp, kp, w, cb + m0 * ldc, ldc, MR, add);
            switch (M - m0) {   /* a constant row count per case: the loops unroll */
#define EDGE(r) case r: tile(as + (m0 / MR) * kp * MR, bp, kp, w, cb + m0 * ldc, ldc, r, add); \
                break;
                EDGE(1) EDGE(2) EDGE(3) EDGE(4) EDGE(5) EDGE(6)
                EDGE(7) EDGE(8) EDGE(9) EDGE(10) EDGE(11)
#undef EDGE
                default: break;
            }
        }
    }
}

/* C[M, N] (+)= sum_s A_s^T B_s on the unit (see the header); NKI_BGEMM_REFUSED or
 * NKI_BGEMM_NO_UNIT leave C untouched. */
int nki_bgemm(int64_t M, int64_t N, int64_t K, int64_t nseg,
              const uint16_t *a, int64_t lda, int64_t a_step,
              const uint16_t *b, int64_t ldb, int64_t b_step,
              float *c, int64_t ldc, int32_t accumulate) {
    int unit = nki_bf16_unit();
    if (!unit_enabled || unit == UNIT_NONE)
        return NKI_BGEMM_NO_UNIT;
    if (M <= 0 || N <= 0 || nseg <= 0)
        return NKI_BGEMM_DONE;
    if (K <= 0)
        return NKI_BGEMM_REFUSED;   /* nothing to multiply: the caller's path zeroes/keeps C */
    expo_range ra = EXPO_EMPTY, rb = EXPO_EMPTY;
    for (int64_t s = 0; s < nseg; s++)
        scan_rows(a + s * a_step, K, M, lda, &ra);
    if (ra.bad)
        return NKI_BGEMM_REFUSED;
    if (unit == UNIT_AMX_BF16)   /* scans B while packing it */
        return nki_amx_gemm(M, N, K, nseg, a, lda, a_step, &ra, b, ldb, b_step, c, ldc,
                            accumulate);
    for (int64_t s = 0; s < nseg; s++)
        scan_rows(b + s * b_step, K, N, ldb, &rb);
    if (!operands_safe(&ra, &rb))
        return NKI_BGEMM_REFUSED;
    int64_t kp = (K + 1) / 2, panels = (M + MR - 1) / MR;
    size_t bytes = (size_t)(nseg * panels * kp * MR) * sizeof(uint32_t);
    size_t bbytes = (size_t)kp * 2 * 64;
    uint32_t *apack = aligned_alloc(64, (bytes + 63) / 64 * 64 + bbytes);
    if (apack == NULL)
        return NKI_BGEMM_REFUSED;
    __m512i *bpack = (__m512i *)(apack + (bytes + 63) / 64 * 16);
    for (int64_t s = 0; s < nseg; s++)
        pack_a(a + s * a_step, lda, K, M, apack + s * panels * kp * MR);
    run_unit(M, N, K, nseg, apack, b, ldb, b_step, c, ldc, accumulate, bpack);
    free(apack);
    return NKI_BGEMM_DONE;
}

/* The unit's one instruction on n lanes (n a multiple of 16), for testing its numerics
 * against the numpy model: out[l] = vdpbf16ps(acc[l], a pair l, b pair l). */
__attribute__((target("avx512f,avx512bw,avx512bf16")))
int nki_bf16_dot_lanes(const uint32_t *acc, const uint32_t *a, const uint32_t *b,
                       uint32_t *out, int64_t n) {
    if (!((nki_bf16_units() >> UNIT_AVX512_BF16) & 1))
        return NKI_BGEMM_NO_UNIT;
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        __m512 s = _mm512_castsi512_ps(_mm512_loadu_si512(acc + i));
        __m512bh x = (__m512bh)_mm512_loadu_si512(a + i);
        __m512bh y = (__m512bh)_mm512_loadu_si512(b + i);
        _mm512_storeu_si512(out + i, _mm512_castps_si512(_mm512_dpbf16_ps(s, x, y)));
    }
    return NKI_BGEMM_DONE;
}
