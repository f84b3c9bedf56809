/* bf16 GEMM on AMX (`tdpbf16ps`), the second unit kind behind `nki_bgemm` (bf16gemm.c).
 *
 *   C[M, N] (+)= sum over segments s of  A_s[K, M]^T @ B_s[K, N]      (as in bf16gemm.c)
 *
 * Tiles: C in 16x16 fp32 tiles, A_s^T in 16 (M) x 32 (K) bf16 tiles, B_s in VNNI tiles of
 * 16 K-pairs x 16 (N) columns, each dword one column's (row 2p, row 2p+1) pair. A
 * micro-block is 32 x 32 outputs: tiles 0-3 accumulate it, 4-5 hold two A tiles, 6-7 two B
 * tiles, so every tile loaded feeds two tdpbf16ps.
 *
 * Numerics of one tdpbf16ps, per output element (measured on this unit bit for bit against
 * random and designed operands, and modelled in nki/sim/bf16_model.py `amx_step`): the
 * even-row products (rows 2p) are summed in a chain of fused multiply-adds from +0 in pair
 * order, the odd-row products in a second chain; each step is rounded to fp32 (nearest
 * even) and flushed to zero when subnormal; then the two chains' sum is rounded (and
 * flushed), then added to the accumulator (rounded, flushed). Inputs are read with subnormals
 * as zero. One instruction takes up to 16 pairs (32 K rows): a segment's K rows run as
 * blocks of 32 through the accumulator tile, zeroed at the segment's start, and the
 * segment's result is then added to C with an IEEE fp32 add, so folded segments keep the
 * bits of the instructions run one at a time. The guard in bf16gemm.c makes DAZ/FTZ
 * invisible; the order of the sums remains this unit's own.
 *
 * Zero padding (M, N to 32, K to 32) only adds +0 products, which leave every chain's value
 * unchanged (a chain starts from +0, so it never holds -0).
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16gemm.h"

#define TILE_BYTES 1024
#define TILE_ELEMS 512   /* bf16 per tile: 16 rows of 32 */
#define GROUP 4          /* 32-column strips of B packed per pass: 256 B of each K row */
#define PREFETCH_PAIRS 4 /* K row pairs read ahead while packing B */

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Every tile 16 rows x 64 bytes (palette 1). */
__attribute__((target("amx-tile")))
static void configure_tiles(void) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

/* Columns 16h..16h+15 of two K rows as 16 dwords, each column's (row 2p, row 2p+1) pair:
 * the VNNI pairing both operands' packing uses (one vpermt2w). */
__attribute__((target("avx512f,avx512bw"), always_inline))
static inline __m512i vnni_pairs(__m512i r0, __m512i r1, int h) {
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                        40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1,
                                        32, 0);
    return _mm512_permutex2var_epi16(r0, h ? _mm512_add_epi16(lo, _mm512_set1_epi16(16)) : lo,
                                     r1);
}

/* One row's first columns under mask m (zero past it), or zeros for a row past K (NULL). */
__attribute__((target("avx512f,avx512bw"), always_inline))
static inline __m512i load_row(const uint16_t *row, __mmask32 m) {
    return row ? _mm512_maskz_loadu_epi16(m, row) : _mm512_setzero_si512();
}

/* In-register 16x16 dword transpose (four shuffle stages). */
__attribute__((target("avx512f"), always_inline))
static inline void transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int h = 0; h < 16; h += 8)   /* 128-bit lanes 0,2 and 1,3 of row groups 4 apart */
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_i32x4(u[h + i], u[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_i32x4(u[h + i], u[h + i + 4], 0xDD);
        }
    for (int i = 0; i < 8; i++) {     /* then of row groups 8 apart: column i, i + 8 */
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xDD);
    }
}

/* One A tile: rows m0..m0+15 of A^T, K rows k0..k0+31 (pairs as dwords). */
__attribute__((target("avx512f,avx512bw")))
static void pack_a_tile(const uint16_t *a, int64_t lda, int64_t K, int64_t M, int64_t m0,
                        int64_t k0, uint16_t *tile) {
    __m512i r[16];
    int64_t w = M - m0 < 16 ? M - m0 : 16;
    __mmask32 m = (__mmask32)((1u << w) - 1);
    for (int p = 0; p < 16; p++) {
        int64_t k = k0 + 2 * p;
        r[p] = vnni_pairs(load_row(k < K ? a + k * lda + m0 : NULL, m),
                          load_row(k + 1 < K ? a + (k + 1) * lda + m0 : NULL, m), 0);
    }
    transpose16(r);
    for (int i = 0; i < 16; i++)
        _mm512_store_si512((__m512i *)tile + i, r[i]);
}

/* A micro-block's running sums (4 tiles, 1024 floats) (+)= one segment's (a copy when
 * !add): one IEEE add per element, as that instruction's own add into PSUM. */
__attribute__((target("avx512f")))
static void add_sums(float *sums, const float *seg, int add) {
    for (int i = 0; i < 1024; i += 16) {
        __m512 v = _mm512_load_ps(seg + i);
        _mm512_store_ps(sums + i, add ? _mm512_add_ps(_mm512_load_ps(sums + i), v) : v);
    }
}

/* Between C (rows m0.., columns n0.., edges masked) and a micro-block's running sums, laid
 * out as its four 16x16 tiles: to_sums reads C (zero past the edges), else writes C. */
__attribute__((target("avx512f")))
static void move_block(float *c, int64_t ldc, float *sums, int64_t M, int64_t N, int64_t m0,
                       int64_t n0, int to_sums) {
    for (int q = 0; q < 4; q++) {
        int64_t mi = m0 + (q >> 1) * 16, ni = n0 + (q & 1) * 16;
        int64_t mr = mi >= M ? 0 : (M - mi < 16 ? M - mi : 16);
        int64_t w = ni >= N ? 0 : (N - ni < 16 ? N - ni : 16);
        __mmask16 m = (__mmask16)((1u << w) - 1);
        for (int64_t i = 0; i < 16; i++) {
            float *row = c + (mi + i) * ldc + ni, *t = sums + q * 256 + 16 * i;
            if (to_sums)
                _mm512_store_ps(t, i < mr ? _mm512_maskz_loadu_ps(m, row)
                                          : _mm512_setzero_ps());
            else if (i < mr)
                _mm512_mask_storeu_ps(row, m, _mm512_load_ps(t));
        }
    }
}

/* One segment of one 32x32 micro-block: tiles 0-3 = sum over its K blocks, from +0. */
__attribute__((target("amx-tile,amx-bf16")))
static void block_segment(const uint16_t *a0, const uint16_t *a1, const uint16_t *bt,
                          int64_t kblocks, float *out) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t kb = 0; kb < kblocks; kb++) {
        _tile_loadd(4, a0 + kb * TILE_ELEMS, 64);
        _tile_loadd(5, a1 + kb * TILE_ELEMS, 64);
        _tile_loadd(6, bt + (2 * kb) * TILE_ELEMS, 64);
        _tile_loadd(7, bt + (2 * kb + 1) * TILE_ELEMS, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_stored(1, out + 256, 64);
    _tile_stored(2, out + 512, 64);
    _tile_stored(3, out + 768, 64);
}

/* Packed A: tile (s, mt, kb) at ((s * mtiles + mt) * kblocks + kb) * TILE_ELEMS, mtiles
 * even (a zero tile pads an odd count). */
static void pack_a_all(const uint16_t *a, int64_t lda, int64_t a_step, int64_t K, int64_t M,
                       int64_t nseg, int64_t mtiles, int64_t kblocks, uint16_t *ap) {
    for (int64_t s = 0; s < nseg; s++)
        for (int64_t mt = 0; mt < mtiles; mt++)
            for (int64_t kb = 0; kb < kblocks; kb++) {
                uint16_t *tile = ap + ((s * mtiles + mt) * kblocks + kb) * TILE_ELEMS;
                if (mt * 16 < M)
                    pack_a_tile(a + s * a_step, lda, K, M, mt * 16, kb * 32, tile);
                else
                    memset(tile, 0, TILE_BYTES);
            }
}

/* The pending add of one segment's micro-block into its running sums: done one block later,
 * so its vector loads never wait on tile stores still in flight. */
typedef struct { const float *seg; float *sums; int add; } pending_add;

static void settle(pending_add *p) {
    if (p->seg)
        add_sums(p->sums, p->seg, p->add);
    p->seg = NULL;
}

/* One K row pair (r0, r1; NULL past K) of the group, columns g0.. (w of them): per 32-column
 * strip j one 64-byte load per row, split into row p of its two tiles (tile_step apart
 * from one strip to the next). */
__attribute__((target("avx512f,avx512bw")))
static void pack_b_pair(const uint16_t *r0, const uint16_t *r1, int64_t w, int64_t strips,
                        int64_t p, int64_t tile_step, uint16_t *tiles, scan_state *st) {
    for (int64_t j = 0; j < strips; j++) {
        int64_t left = w - 32 * j;
        __mmask32 m = left >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << left) - 1);
        __m512i v0 = load_row(r0 ? r0 + 32 * j : NULL, m);
        __m512i v1 = load_row(r1 ? r1 + 32 * j : NULL, m);
        scan_vector(v0, m, st);    /* the guard, on the values just loaded */
        scan_vector(v1, m, st);
        for (int h = 0; h < 2; h++)
            _mm512_store_si512((__m512i *)(tiles + j * tile_step + h * TILE_ELEMS) + p,
                               vnni_pairs(v0, v1, h));
    }
}

/* Packed B of a group: tile (s, strip j, kb, half h), every segment's, reading GROUP x 32
 * columns of each K row at once (and prefetching the rows a few pairs ahead: the rows are
 * a partition pitch apart, beyond the hardware prefetcher's reach); the guard's scan of
 * those columns goes into rb. */
__attribute__((target("avx512f,avx512bw")))
static void pack_b_group(const uint16_t *b, int64_t ldb, int64_t b_step, int64_t K,
                         int64_t N, int64_t g0, int64_t strips, int64_t nseg, int64_t kblocks,
                         uint16_t *bp, expo_range *rb) {
    int64_t w = N - g0, bytes = (w < 32 * strips ? w : 32 * strips) * 2;
    scan_state st = scan_start();
    for (int64_t s = 0; s < nseg; s++) {
        const uint16_t *bs = b + s * b_step + g0;
        for (int64_t k = 0; k < kblocks * 32; k += 2) {
            for (int64_t r = k + 2 * PREFETCH_PAIRS; r < k + 2 * PREFETCH_PAIRS + 2; r++)
                for (int64_t off = 0; r < K && off < bytes; off += 64)
                    _mm_prefetch((const char *)(bs + r * ldb) + off, _MM_HINT_T0);
            int64_t kb = k / 32, p = (k % 32) / 2;
            pack_b_pair(k < K ? bs + k * ldb : NULL, k + 1 < K ? bs + (k + 1) * ldb : NULL, w,
                        strips, p, kblocks * 2 * TILE_ELEMS,
                        bp + ((s * GROUP * kblocks + kb) * 2) * TILE_ELEMS, &st);
        }
    }
    scan_finish(&st, rb);
}

/* Columns g0.. (w of them) of C's M rows to (save) or from the backup (M x w, packed). */
static void backup_columns(float *c, int64_t ldc, int64_t M, int64_t g0, int64_t w,
                           float *backup, int save) {
    for (int64_t i = 0; i < M; i++) {
        float *row = c + i * ldc + g0, *kept = backup + i * w;
        memcpy(save ? kept : row, save ? row : kept, (size_t)w * sizeof(float));
    }
}

/* Loop order: groups of GROUP 32-column strips (B packed once per group); per 32-row block
 * of the group, the segments in order, then the strips: the stationary tiles of a segment
 * stay in L1 across the strips, and so do the GROUP micro-blocks' running sums, which meet
 * C only at the block's start (accumulate) and end. */
__attribute__((target("amx-tile,amx-bf16")))
static int run_amx(int64_t M, int64_t N, int64_t K, int64_t nseg, const uint16_t *ap,
                   int64_t mtiles, int64_t kblocks, const expo_range *ra, const uint16_t *b,
                   int64_t ldb, int64_t b_step, float *c, int64_t ldc, int accumulate,
                   uint16_t *bp, float *sums, float *out, float *backup) {
    pending_add p = {NULL, NULL, 0};
    int slot = 0;
    expo_range rb = EXPO_EMPTY;
    configure_tiles();
    for (int64_t g0 = 0; g0 < N; g0 += 32 * GROUP) {
        int64_t strips = (N - g0 + 31) / 32 < GROUP ? (N - g0 + 31) / 32 : GROUP;
        int64_t w = N - g0 < 32 * GROUP ? N - g0 : 32 * GROUP;
        pack_b_group(b, ldb, b_step, K, N, g0, strips, nseg, kblocks, bp, &rb);
        if (!operands_safe(ra, &rb)) {   /* refused: C as it was, earlier groups restored */
            for (int64_t h0 = 0; h0 < g0; h0 += 32 * GROUP)
                backup_columns(c, ldc, M, h0, 32 * GROUP, backup + h0 * M, 0);
            _tile_release();
            return NKI_BGEMM_REFUSED;
        }
        if (g0 + w < N)   /* a later group may still refuse */
            backup_columns(c, ldc, M, g0, w, backup + g0 * M, 1);
        for (int64_t mt = 0; mt < mtiles; mt += 2) {
            for (int64_t j = 0; accumulate && j < strips; j++)
                move_block(c, ldc, sums + j * 1024, M, N, mt * 16, g0 + 32 * j, 1);
            for (int64_t s = 0; s < nseg; s++) {
                const uint16_t *a0 = ap + ((s * mtiles + mt) * kblocks) * TILE_ELEMS;
                for (int64_t j = 0; j < strips; j++) {
                    float *o = out + (slot ^= 1) * 1024;
                    block_segment(a0, a0 + kblocks * TILE_ELEMS,
                                  bp + (s * GROUP + j) * kblocks * 2 * TILE_ELEMS, kblocks, o);
                    settle(&p);
                    p = (pending_add){o, sums + j * 1024, accumulate || s > 0};
                }
            }
            settle(&p);
            for (int64_t j = 0; j < strips; j++)
                move_block(c, ldc, sums + j * 1024, M, N, mt * 16, g0 + 32 * j, 0);
        }
    }
    _tile_release();
    return NKI_BGEMM_DONE;
}

/* This thread's scratch (packed operands, sums, C's backup), kept between calls: a fresh
 * allocation per call would pay the kernel's page zeroing every time. */
static __thread void *scratch;
static __thread size_t scratch_bytes;

static void *scratch_of(size_t bytes) {
    if (bytes > scratch_bytes) {
        free(scratch);
        scratch = aligned_alloc(64, (bytes + 63) / 64 * 64);
        scratch_bytes = scratch ? bytes : 0;
    }
    return scratch;
}

int nki_amx_gemm(int64_t M, int64_t N, int64_t K, int64_t nseg, const uint16_t *a,
                 int64_t lda, int64_t a_step, const expo_range *ra, const uint16_t *b,
                 int64_t ldb, int64_t b_step, float *c, int64_t ldc, int accumulate) {
    int64_t mtiles = ((M + 15) / 16 + 1) / 2 * 2, kblocks = (K + 31) / 32;
    size_t abytes = (size_t)(nseg * mtiles * kblocks) * TILE_BYTES;
    size_t bbytes = (size_t)(nseg * GROUP * kblocks * 2) * TILE_BYTES;
    size_t sbytes = (GROUP + 2) * 4 * TILE_BYTES;
    size_t cbytes = (size_t)M * (size_t)((N + 32 * GROUP - 1) / (32 * GROUP) * 32 * GROUP) * 4;
    uint16_t *ap = scratch_of(abytes + bbytes + sbytes + cbytes);
    if (ap == NULL)
        return NKI_BGEMM_REFUSED;
    uint16_t *bp = ap + abytes / 2;
    float *sums = (float *)(bp + bbytes / 2), *out = sums + GROUP * 1024;
    float *backup = sums + (GROUP + 2) * 1024;
    pack_a_all(a, lda, a_step, K, M, nseg, mtiles, kblocks, ap);
    return run_amx(M, N, K, nseg, ap, mtiles, kblocks, ra, b, ldb, b_step, c, ldc, accumulate,
                   bp, sums, out, backup);
}

/* One tdpbf16ps on full tiles, for testing its numerics against the numpy model:
 * acc/out fp32 [16][16], a bf16 [16][32] (row m: K pairs), b bf16 [16][32] (row p:
 * column n's pair at 2n, 2n + 1). */
__attribute__((target("amx-tile,amx-bf16")))
int nki_amx_dot_tile(const float *acc, const uint16_t *a, const uint16_t *b, float *out) {
    if (nki_bf16_unit() != UNIT_AMX_BF16)
        return NKI_BGEMM_NO_UNIT;
    configure_tiles();
    _tile_loadd(0, acc, 64);
    _tile_loadd(4, a, 64);
    _tile_loadd(6, b, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_stored(0, out, 64);
    _tile_release();
    return NKI_BGEMM_DONE;
}
