/* Mithril C runtime (see runtime.h). MT_USE_BLAS selects CBLAS GEMM; otherwise a blocked, vectorisable
 * fallback. Large GEMMs are split over the caller's nt OpenMP threads, each calling a single-threaded GEMM.
 *
 * BLAS flavours (chosen by toolchain.py, or by hand when building an exported model):
 *   -DMT_USE_BLAS                    any CBLAS (-lopenblas, -lcblas -lblas, -lblas, ...);
 *   -DMT_BLAS_OPENBLAS               ... which is OpenBLAS: told to run single-threaded (Mithril's threads split);
 *   -DMT_BLAS_SCIPY                  the scipy-openblas32 wheel, whose symbols are all prefixed scipy_
 *                                    (needs -I<wheel>/include; implies MT_USE_BLAS and MT_BLAS_OPENBLAS). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "runtime.h"

#ifdef MT_BLAS_SCIPY
#ifndef MT_USE_BLAS
#define MT_USE_BLAS 1
#endif
#ifndef MT_BLAS_OPENBLAS
#define MT_BLAS_OPENBLAS 1
#endif
#include <cblas.h> /* the wheel's header: prototypes of the prefixed symbols */
#define cblas_sgemm scipy_cblas_sgemm
#define cblas_dgemm scipy_cblas_dgemm
#define openblas_get_num_threads scipy_openblas_get_num_threads
#define openblas_set_num_threads scipy_openblas_set_num_threads
#define MT_BLAS_ORDER(x) ((enum CBLAS_ORDER)(x))
#define MT_BLAS_TRANS(x) ((enum CBLAS_TRANSPOSE)(x))
#elif defined(MT_USE_BLAS)
/* CBLAS prototypes (declared here so no cblas.h is needed): row-major 101, no-trans 111, trans 112 */
void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
void cblas_dgemm(int, int, int, int, int, int, double, const double *, int, const double *, int, double, double *, int);
#ifdef MT_BLAS_OPENBLAS
int openblas_get_num_threads(void);
void openblas_set_num_threads(int);
#endif
#define MT_BLAS_ORDER(x) (x)
#define MT_BLAS_TRANS(x) (x)
#endif


#ifdef MT_BLAS_OPENBLAS
/* OpenBLAS always runs single-threaded: Mithril splits every large GEMM over its own OpenMP threads (the
 * caller's nt), so one thread pool serves BLAS, convolutions and elementwise loops alike. Two pools (OpenMP
 * plus OpenBLAS's pthreads, whose idle workers spin for a long while after each call) would fight over
 * the cores between every BLAS call and every OpenMP loop. Reading the count is a load of a global; it is
 * only set when it changed. */
#define MT_BLAS_SERIAL() do { if (openblas_get_num_threads() != 1) openblas_set_num_threads(1); } while (0)
#else
#define MT_BLAS_SERIAL() do { } while (0)
#endif

void mt_blas_serial(void) { MT_BLAS_SERIAL(); }

/* GEMMs with fewer multiply-adds than this run on the calling thread (a parallel region costs a few us) */
#define MT_SPLIT_MIN (1L << 19)
/* blocks per thread a split GEMM is cut into */
#define MT_SPLIT_BLOCKS 2

/* out[q] = max(out[q], r[q * stride]) for q in [lo, hi), NaN-propagating (a constant stride vectorises:
 * the select is mt_sel_*, which needs no if-conversion) */
#define MT_MAX_ROW(T, S, out, r, lo, hi, stride)                                                          \
    for (long q = (lo); q < (hi); q++) {                                                                  \
        T v_ = (r)[q * (stride)], b_ = (out)[q];                                                          \
        (out)[q] = mt_sel_##S((v_ > b_) | (v_ != v_), v_, b_);                                            \
    }

/* Matrix-vector products (GEMMs with one row, M == 1: a decode step's every weight product) read each
 * weight once, in order: C[j] = alpha * dot(a, row j of B) (B transposed, a weight [N, K]: contiguous dot
 * products) or alpha * sum_k a[k] * B[k, j] (B [K, N]: rows of B scaled and added). No copy of B; the
 * output rows are split over the caller's nt OpenMP threads when there is enough work. Used with BLAS
 * too: OpenBLAS's sgemm packs B even for one row (GPT-2 small's weight products, one thread: 134 ms per
 * token with cblas_sgemm, 37-48 ms here; 425 ms with the blocked fallback that transposes B). GCC and Clang get
 * explicit vector lanes (a float sum is not reordered into lanes without -ffast-math); other compilers
 * the scalar loops. */
#define MT_GEMV_MIN 65536 /* multiply-adds below which a GEMV runs on the calling thread */
#define MT_GEMV_ROWS 4    /* rows of a transposed B per dot-product pass (a's lanes loaded once) */
#define MT_GEMV_COLS 256  /* columns of B [K, N] per pass (their sums stay in L1) */
#if defined(__GNUC__) || defined(__clang__)
typedef float mt_vf32 __attribute__((vector_size(32)));
typedef double mt_vf64 __attribute__((vector_size(32)));
/* s[r] += sum over k in [*k, ...) of a[k] * b[r * ldb + k], r < MT_GEMV_ROWS; advances *k by whole vectors */
#define MT_DOT_LANES(T, VT, a, b, ldb, K, kp, s)                                                          \
    do {                                                                                                  \
        const long lanes_ = (long)(sizeof(VT) / sizeof(T));                                               \
        VT v_[MT_GEMV_ROWS];                                                                              \
        memset(v_, 0, sizeof v_);                                                                         \
        long k_ = *(kp);                                                                                  \
        for (; k_ + lanes_ <= (K); k_ += lanes_) {                                                        \
            VT x_, y_;                                                                                    \
            memcpy(&x_, (a) + k_, sizeof x_);                                                             \
            for (int r_ = 0; r_ < MT_GEMV_ROWS; r_++) {                                                   \
                memcpy(&y_, (b) + r_ * (ldb) + k_, sizeof y_);                                            \
                v_[r_] += x_ * y_;                                                                        \
            }                                                                                             \
        }                                                                                                 \
        for (int r_ = 0; r_ < MT_GEMV_ROWS; r_++)                                                         \
            for (long l_ = 0; l_ < lanes_; l_++) (s)[r_] += v_[r_][l_];                                   \
        *(kp) = k_;                                                                                       \
    } while (0)
/* acc[q] += x * b[q] for q in [0, n), n a multiple of 4 lanes handled by vectors, the rest after */
#define MT_AXPY_LANES(T, VT, acc, x, b, n, qp)                                                            \
    do {                                                                                                  \
        const long lanes_ = (long)(sizeof(VT) / sizeof(T));                                               \
        long q_ = 0;                                                                                      \
        for (; q_ + lanes_ <= (n); q_ += lanes_) {                                                        \
            VT y_, c_;                                                                                    \
            memcpy(&y_, (b) + q_, sizeof y_);                                                             \
            memcpy(&c_, (acc) + q_, sizeof c_);                                                           \
            c_ += (x) * y_;                                                                               \
            memcpy((acc) + q_, &c_, sizeof c_);                                                           \
        }                                                                                                 \
        *(qp) = q_;                                                                                       \
    } while (0)
#else
typedef float mt_vf32;
typedef double mt_vf64;
#define MT_DOT_LANES(T, VT, a, b, ldb, K, kp, s) do { } while (0)
#define MT_AXPY_LANES(T, VT, acc, x, b, n, qp) do { *(qp) = 0; } while (0)
#endif

#define MT_GEMV_DEFINE(T, S, VT)                                                                           \
    /* C[j] = alpha * dot(a, B[j, :K]) + beta * C[j] for j in [j0, j1) */                                 \
    static void mt_gemv_t_rows_##S(long j0, long j1, long K, T alpha, const T *a, const T *B, long ldb,   \
                                   T beta, T *C) {                                                        \
        for (long j = j0; j < j1; j += MT_GEMV_ROWS) {                                                    \
            T s[MT_GEMV_ROWS] = {0};                                                                      \
            long rows = j1 - j < MT_GEMV_ROWS ? j1 - j : MT_GEMV_ROWS, k = 0;                             \
            const T *b = B + j * ldb;                                                                     \
            if (rows == MT_GEMV_ROWS) MT_DOT_LANES(T, VT, a, b, ldb, K, &k, s);                           \
            for (long r = 0; r < rows; r++) {                                                             \
                T t = s[r];                                                                               \
                for (long q = k; q < K; q++) t += a[q] * b[r * ldb + q];                                  \
                C[j + r] = alpha * t + (beta == 0 ? (T)0 : beta * C[j + r]);                              \
            }                                                                                             \
        }                                                                                                 \
    }                                                                                                     \
    /* C[j] = alpha * sum_k a[k] * B[k, j] + beta * C[j] for j in [j0, j1) */                             \
    static void mt_gemv_n_cols_##S(long j0, long j1, long K, T alpha, const T *a, const T *B, long ldb,   \
                                   T beta, T *C) {                                                        \
        T acc[MT_GEMV_COLS];                                                                              \
        for (long c0 = j0; c0 < j1; c0 += MT_GEMV_COLS) {                                                 \
            long n = j1 - c0 < MT_GEMV_COLS ? j1 - c0 : MT_GEMV_COLS;                                     \
            for (long q = 0; q < n; q++) acc[q] = 0;                                                      \
            for (long k = 0; k < K; k++) {                                                                \
                const T *b = B + k * ldb + c0;                                                            \
                T x = a[k];                                                                               \
                long q;                                                                                   \
                MT_AXPY_LANES(T, VT, acc, x, b, n, &q);                                                   \
                for (; q < n; q++) acc[q] += x * b[q];                                                    \
            }                                                                                             \
            for (long q = 0; q < n; q++)                                                                  \
                C[c0 + q] = alpha * acc[q] + (beta == 0 ? (T)0 : beta * C[c0 + q]);                       \
        }                                                                                                 \
    }                                                                                                     \
    /* one row of C (M == 1) from a contiguous row a of K elements */                                     \
    static void mt_gemv_##S(int tb, long N, long K, T alpha, const T *a, const T *B, long ldb, T beta,    \
                            T *C, int nt) {                                                               \
        long step = tb ? MT_GEMV_ROWS : 16, blocks = (N + step - 1) / step;                               \
        if (nt > blocks) nt = (int)blocks;                                                                \
        if (nt <= 1 || N * K < MT_GEMV_MIN) {                                                             \
            if (tb) mt_gemv_t_rows_##S(0, N, K, alpha, a, B, ldb, beta, C);                               \
            else mt_gemv_n_cols_##S(0, N, K, alpha, a, B, ldb, beta, C);                                  \
            return;                                                                                       \
        }                                                                                                 \
        MT_OMP("omp parallel for schedule(static) num_threads(nt)")                                       \
        for (int part = 0; part < nt; part++) {                                                           \
            long lo, hi;                                                                                  \
            mt_part_range(N, part, nt, step, &lo, &hi);                                                   \
            if (tb) mt_gemv_t_rows_##S(lo, hi, K, alpha, a, B, ldb, beta, C);                             \
            else mt_gemv_n_cols_##S(lo, hi, K, alpha, a, B, ldb, beta, C);                                \
        }                                                                                                 \
    }

#define MT_MB 96  /* rows of A per block (a multiple of MT_MR) */
#define MT_NB 256 /* columns of B per block */
#define MT_KB 128 /* depth per block */
#define MT_MR 6   /* rows of a register tile */

#if defined(__GNUC__) || defined(__clang__)
/* The blocked fallback GEMM: blocks of A and B packed into panels (MT_MR rows of A, two vectors' worth of
 * columns of B, interleaved by k), each pair multiplied by a register tile of MT_MR x 2 vectors (the sums
 * of one depth block stay in registers, then are added to C). Vectors are 64 bytes with AVX-512, 32 with
 * AVX, else 16. Edge tiles are zero-padded. */
#if defined(__AVX512F__)
#define MT_TILE_BYTES 64
#elif defined(__AVX__)
#define MT_TILE_BYTES 32
#else
#define MT_TILE_BYTES 16 /* SSE2, NEON: the tile's 12 vectors fit the 16 registers */
#endif
typedef float mt_tf32 __attribute__((vector_size(MT_TILE_BYTES)));
typedef double mt_tf64 __attribute__((vector_size(MT_TILE_BYTES)));
#define MT_TILE_DEFINE(T, S, VT)                                                                           \
    enum { MT_NR_##S = 2 * (int)(sizeof(VT) / sizeof(T)) };                                              \
    /* C[mr x nr] += A panel (kc x MT_MR) times B panel (kc x MT_NR) */                                   \
    static inline void mt_tile_##S(long kc, const T *ap, const T *bp, T *C, long ldc, long mr, long nr) { \
        const long L = (long)(sizeof(VT) / sizeof(T));                                                    \
        VT acc[MT_MR][2];                                                                                 \
        memset(acc, 0, sizeof acc);                                                                       \
        for (long k = 0; k < kc; k++) {                                                                   \
            VT b0, b1;                                                                                    \
            memcpy(&b0, bp + k * MT_NR_##S, sizeof b0);                                                   \
            memcpy(&b1, bp + k * MT_NR_##S + L, sizeof b1);                                               \
            for (int r = 0; r < MT_MR; r++) {                                                             \
                T a = ap[k * MT_MR + r];                                                                  \
                acc[r][0] += a * b0;                                                                      \
                acc[r][1] += a * b1;                                                                      \
            }                                                                                             \
        }                                                                                                 \
        for (long r = 0; r < mr; r++) {                                                                   \
            T *c = C + r * ldc;                                                                           \
            if (nr == MT_NR_##S) {                                                                        \
                VT c0, c1;                                                                                \
                memcpy(&c0, c, sizeof c0);                                                                \
                memcpy(&c1, c + L, sizeof c1);                                                            \
                c0 += acc[r][0];                                                                          \
                c1 += acc[r][1];                                                                          \
                memcpy(c, &c0, sizeof c0);                                                                \
                memcpy(c + L, &c1, sizeof c1);                                                            \
            } else {                                                                                      \
                T row[2 * sizeof(VT) / sizeof(T)];                                                        \
                memcpy(row, &acc[r][0], sizeof(VT));                                                      \
                memcpy(row + L, &acc[r][1], sizeof(VT));                                                  \
                for (long j = 0; j < nr; j++) c[j] += row[j];                                             \
            }                                                                                             \
        }                                                                                                 \
    }                                                                                                     \
    /* C[m0:m1, n0:n1] += alpha * op(A) op(B) over depth [k0, k1), through packed panels */               \
    static void mt_gemm_block_##S(int ta, int tb, long m0, long m1, long n0, long n1, long k0, long k1,   \
                                  T alpha, const T *A, long lda, const T *B, long ldb, T *C, long ldc,   \
                                  T *apack, T *bpack) {                                                   \
        const long NR = MT_NR_##S, kc = k1 - k0;                                                          \
        for (long j0 = n0; j0 < n1; j0 += NR) { /* each source row read in order */                      \
            T *bp = bpack + (j0 - n0) * kc;                                                               \
            if (tb)                                                                                       \
                for (long j = 0; j < NR; j++)                                                             \
                    for (long k = 0; k < kc; k++) bp[k * NR + j] = j0 + j < n1 ? B[(j0 + j) * ldb + k0 + k] : 0; \
            else                                                                                          \
                for (long k = 0; k < kc; k++)                                                             \
                    for (long j = 0; j < NR; j++) bp[k * NR + j] = j0 + j < n1 ? B[(k0 + k) * ldb + j0 + j] : 0; \
        }                                                                                                 \
        for (long i0 = m0; i0 < m1; i0 += MT_MR) {                                                        \
            T *ap = apack + (i0 - m0) * kc;                                                               \
            for (long k = 0; k < kc; k++)                                                                 \
                for (long r = 0; r < MT_MR; r++)                                                          \
                    ap[k * MT_MR + r] = i0 + r < m1 ? alpha * (ta ? A[(k0 + k) * lda + i0 + r] : A[(i0 + r) * lda + k0 + k]) : 0; \
        }                                                                                                 \
        for (long i0 = m0; i0 < m1; i0 += MT_MR)                                                          \
            for (long j0 = n0; j0 < n1; j0 += NR) {                                                       \
                long mr = m1 - i0 < MT_MR ? m1 - i0 : MT_MR, nr = n1 - j0 < NR ? n1 - j0 : NR;            \
                mt_tile_##S(kc, apack + (i0 - m0) * kc, bpack + (j0 - n0) * kc, C + i0 * ldc + j0, ldc, mr, nr); \
            }                                                                                             \
    }
MT_TILE_DEFINE(float, f32, mt_tf32)
MT_TILE_DEFINE(double, f64, mt_tf64)
#define MT_FALLBACK_BLOCK(T, S)                                                                            \
    T apack[MT_MB * MT_KB], bpack[(MT_NB + MT_NR_##S) * MT_KB];                                          \
    for (long k0 = 0; k0 < K; k0 += MT_KB) {                                                              \
        long k1 = k0 + MT_KB < K ? k0 + MT_KB : K;                                                        \
        mt_gemm_block_##S(ta, tb, m0, m1, n0, n1, k0, k1, alpha, A, lda, B, ldb, C, ldc, apack, bpack);   \
    }
#else
#define MT_FALLBACK_BLOCK(T, S)                                                                            \
    T bpack[MT_KB * MT_NB];                                                                               \
    for (long k0 = 0; k0 < K; k0 += MT_KB) {                                                              \
        long k1 = k0 + MT_KB < K ? k0 + MT_KB : K, nw = n1 - n0;                                          \
        for (long k = k0; k < k1; k++)                                                                    \
            for (long j = n0; j < n1; j++) bpack[(k - k0) * nw + (j - n0)] = tb ? B[j * ldb + k] : B[k * ldb + j]; \
        for (long i = m0; i < m1; i++) {                                                                  \
            T *restrict c = C + i * ldc + n0;                                                             \
            for (long k = k0; k < k1; k++) {                                                              \
                T a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);                                     \
                const T *restrict b = bpack + (k - k0) * nw;                                              \
                for (long j = 0; j < nw; j++) c[j] += a * b[j];                                           \
            }                                                                                             \
        }                                                                                                 \
    }
#endif

/* [*lo, *hi): the q in [q0, q1) whose index q * stride + off lies in [0, size) (the outputs of a kernel tap
 * that read inside the image's rows or columns; an empty range has *lo == *hi) */
static inline void mt_span(long off, long stride, long size, long q0, long q1, long *lo, long *hi) {
    long a = off >= 0 ? 0 : (-off + stride - 1) / stride;
    long b = size - off > 0 ? (size - off + stride - 1) / stride : 0;
    if (a < q0) a = q0;
    if (a > q1) a = q1;
    if (b > q1) b = q1;
    if (b < a) b = a;
    *lo = a;
    *hi = b;
}

#define MT_DEFINE(T, S, BLASFN)                                                                            \
    static void mt_gemm_fallback_##S(int ta, int tb, long M, long N, long K, T alpha, const T *A, long lda, \
                                     const T *B, long ldb, T beta, T *C, long ldc, int nt) {             \
        (void)nt; /* without OpenMP */                                                                    \
        long mblocks = (M + MT_MB - 1) / MT_MB, nblocks = (N + MT_NB - 1) / MT_NB;                        \
        MT_OMP("omp parallel for collapse(2) schedule(static) num_threads(nt) if(nt > 1 && M * N * K > 262144)") \
        for (long mb = 0; mb < mblocks; mb++)                                                             \
            for (long nb = 0; nb < nblocks; nb++) {                                                       \
                long m0 = mb * MT_MB, m1 = m0 + MT_MB < M ? m0 + MT_MB : M;                               \
                long n0 = nb * MT_NB, n1 = n0 + MT_NB < N ? n0 + MT_NB : N;                               \
                for (long i = m0; i < m1; i++) {                                                          \
                    T *c = C + i * ldc;                                                                   \
                    if (beta == 0) for (long j = n0; j < n1; j++) c[j] = 0;                               \
                    else if (beta != 1) for (long j = n0; j < n1; j++) c[j] *= beta;                      \
                }                                                                                         \
                MT_FALLBACK_BLOCK(T, S)                                                                   \
            }                                                                                             \
    }                                                                                                     \
    static void mt_gemm1_##S(int ta, int tb, long M, long N, long K, T alpha, const T *A, long lda,         \
                             const T *B, long ldb, T beta, T *C, long ldc) {                              \
        BLASFN                                                                                            \
        mt_gemm_fallback_##S(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 1);                    \
    }                                                                                                     \
    void mt_gemm_##S(int ta, int tb, long M, long N, long K, T alpha, const T *A, long lda, const T *B,   \
                     long ldb, T beta, T *C, long ldc, int nt) {                                          \
        if (M <= 0 || N <= 0) return;                                                                     \
        if (K <= 0) {                                                                                     \
            for (long i = 0; i < M; i++)                                                                  \
                for (long j = 0; j < N; j++) C[i * ldc + j] = beta == 0 ? 0 : beta * C[i * ldc + j];      \
            return;                                                                                       \
        }                                                                                                 \
        if (M == 1 && (!ta || lda == 1)) { /* one row: GEMV (with BLAS too, see above) */            \
            mt_gemv_##S(tb, N, K, alpha, A, B, ldb, beta, C, nt);                                         \
            return;                                                                                       \
        }                                                                                                 \
        MT_BLAS_SERIAL();                                                                                 \
        if (nt <= 1 || M * N * K < MT_SPLIT_MIN || (M < 32 && N < 32)) {                                  \
            mt_gemm1_##S(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);                           \
            return;                                                                                       \
        }                                                                                                 \
        /* split the longer side of C (N in multiples of 16 so vector stores stay aligned) into a few     \
         * blocks per thread, handed out dynamically: a thread slowed down by another process (or by    \
         * another library's thread pool still spinning) does fewer of them */                          \
        int by_cols = N >= 2 * M;                                                                         \
        long side = by_cols ? N : M, align = by_cols ? 16 : 1;                                            \
        long blocks = side / (by_cols ? 64 : 16);                                                         \
        if (blocks > MT_SPLIT_BLOCKS * nt) blocks = MT_SPLIT_BLOCKS * nt;                                 \
        if (blocks < nt) blocks = nt;                                                                     \
        MT_OMP("omp parallel for schedule(dynamic, 1) num_threads(nt)")                                  \
        for (long part = 0; part < blocks; part++) {                                                      \
            long lo, hi;                                                                                  \
            mt_part_range(side, part, blocks, align, &lo, &hi);                                           \
            if (lo >= hi) continue;                                                                       \
            if (by_cols)                                                                                  \
                mt_gemm1_##S(ta, tb, M, hi - lo, K, alpha, A, lda, tb ? B + lo * ldb : B + lo, ldb, beta, \
                             C + lo, ldc);                                                                \
            else                                                                                          \
                mt_gemm1_##S(ta, tb, hi - lo, N, K, alpha, ta ? A + lo : A + lo * lda, lda, B, ldb, beta, \
                             C + lo * ldc, ldc);                                                          \
        }                                                                                                 \
    }                                                                                                     \
    /* d[q] = s[q * sw + off] for q in [lo, hi), zero for q in [q0, lo) and [hi, q1): a row of columns */ \
    static inline void mt_row_##S(T *d, const T *s, long sw, long off, long q0, long lo, long hi, long q1) { \
        for (long q = q0; q < lo; q++) d[q] = 0;                                                          \
        if (sw == 1) {                                                                                    \
            if (hi > lo) memcpy(d + lo, s + lo + off, (hi - lo) * sizeof(T));                             \
        } else {                                                                                          \
            for (long q = lo; q < hi; q++) d[q] = s[q * sw + off];                                        \
        }                                                                                                 \
        for (long q = hi; q < q1; q++) d[q] = 0;                                                          \
    }                                                                                                     \
    void mt_im2col_range_##S(const T *x, T *cols, long C, long H, long W, long kh, long kw, long sh,      \
                             long sw, long ph, long pw, long dh, long dw, long OH, long OW, long p0,      \
                             long p1) {                                                                   \
        long n = p1 - p0;                                                                                 \
        (void)OH;                                                                                         \
        for (long c = 0; c < C; c++)                                                                      \
            for (long i = 0; i < kh; i++)                                                                 \
                for (long j = 0; j < kw; j++) {                                                           \
                    T *d = cols + ((c * kh + i) * kw + j) * n - p0;                                       \
                    const T *src = x + c * H * W;                                                         \
                    long off = j * dw - pw;                                                               \
                    for (long p = p0; p < p1;) {                                                          \
                        long oh = p / OW, ow = p - oh * OW;                                               \
                        long end = ow + (p1 - p) < OW ? ow + (p1 - p) : OW; /* this output row's part */  \
                        long h = oh * sh - ph + i * dh;                                                   \
                        T *dd = d + (p - ow); /* dd[ow'] is the column of output (oh, ow') */             \
                        if (h < 0 || h >= H) {                                                            \
                            for (long q = ow; q < end; q++) dd[q] = 0;                                    \
                        } else {                                                                          \
                            long lo, hi; /* q in [lo, hi) reads inside row h: w = q * sw + off in [0, W) */ \
                            mt_span(off, sw, W, ow, end, &lo, &hi);                                       \
                            mt_row_##S(dd, src + h * W, sw, off, ow, lo, hi, end);                        \
                        }                                                                                 \
                        p += end - ow;                                                                    \
                    }                                                                                     \
                }                                                                                         \
    }                                                                                                     \
    void mt_im2col_##S(const T *x, T *cols, long C, long H, long W, long kh, long kw, long sh, long sw,   \
                       long ph, long pw, long dh, long dw, long OH, long OW, int nt) {                    \
        (void)nt; /* without OpenMP */                                                                    \
        MT_OMP("omp parallel for collapse(2) num_threads(nt) if(nt > 1 && C * kh * kw * OH * OW > 65536)") \
        for (long c = 0; c < C; c++)                                                                      \
            for (long r = 0; r < kh * kw; r++) {                                                          \
                long i = r / kw, j = r % kw;                                                              \
                T *dst = cols + ((c * kh + i) * kw + j) * OH * OW;                                        \
                const T *src = x + c * H * W;                                                             \
                long offh = i * dh - ph, offw = j * dw - pw, oh0, oh1, ow0, ow1;                          \
                mt_span(offh, sh, H, 0, OH, &oh0, &oh1); /* output rows reading inside the image */       \
                mt_span(offw, sw, W, 0, OW, &ow0, &ow1); /* output columns reading inside a row */        \
                for (long oh = 0; oh < OH; oh++) {                                                        \
                    T *d = dst + oh * OW;                                                                 \
                    if (oh < oh0 || oh >= oh1) { for (long ow = 0; ow < OW; ow++) d[ow] = 0; continue; }  \
                    mt_row_##S(d, src + (oh * sh + offh) * W, sw, offw, 0, ow0, ow1, OW);                 \
                }                                                                                         \
            }                                                                                             \
    }                                                                                                     \
    void mt_wino_filter_##S(const T *w, T *U, long rows, long C) {                                      \
        for (long r = 0; r < rows; r++) {                                                                 \
            T *u = U + r * 16 * C;                                                                        \
            for (long c = 0; c < C; c++) {                                                                \
                const T *g = w + (r * C + c) * 9;                                                         \
                T a[4][3];                                                                                \
                for (int j = 0; j < 3; j++) {                                                             \
                    a[0][j] = g[j];                                                                       \
                    a[1][j] = (T)0.5 * (g[j] + g[3 + j] + g[6 + j]);                                      \
                    a[2][j] = (T)0.5 * (g[j] - g[3 + j] + g[6 + j]);                                      \
                    a[3][j] = g[6 + j];                                                                   \
                }                                                                                         \
                for (int i = 0; i < 4; i++) {                                                             \
                    u[(i * 4 + 0) * C + c] = a[i][0];                                                     \
                    u[(i * 4 + 1) * C + c] = (T)0.5 * (a[i][0] + a[i][1] + a[i][2]);                      \
                    u[(i * 4 + 2) * C + c] = (T)0.5 * (a[i][0] - a[i][1] + a[i][2]);                      \
                    u[(i * 4 + 3) * C + c] = a[i][2];                                                     \
                }                                                                                         \
            }                                                                                             \
        }                                                                                                 \
    }                                                                                                     \
    void mt_wino_input_##S(const T *x, T *V, long C, long H, long W, long ph, long pw, long TW, long t0,  \
                           long t1, T *buf) {                                                             \
        long n = t1 - t0, wp = 2 * TW + 2, half = TW + 1;                                                 \
        long lo = pw < wp ? pw : wp, hi = pw + W < wp ? pw + W : wp;                                      \
        T *row = buf, *e = buf + 4 * wp; /* 4 padded input rows; their vertical combinations, even/odd */ \
        for (long c = 0; c < C; c++) {                                                                    \
            const T *xc = x + c * H * W;                                                                  \
            T *v = V + c * 16 * n - t0;                                                                   \
            for (long t = t0; t < t1;) {                                                                  \
                long th = t / TW, tw0 = t - th * TW;                                                      \
                long tw1 = tw0 + (t1 - t) < TW ? tw0 + (t1 - t) : TW;                                     \
                long h0 = 2 * th - ph;                                                                    \
                for (int i = 0; i < 4; i++) { /* row[i][k] = x[h0 + i, k - pw], zero outside */          \
                    T *r = row + i * wp;                                                                  \
                    long h = h0 + i;                                                                      \
                    if (h < 0 || h >= H) { for (long k = 0; k < wp; k++) r[k] = 0; continue; }            \
                    for (long k = 0; k < lo; k++) r[k] = 0;                                               \
                    if (hi > lo) memcpy(r + lo, xc + h * W + (lo - pw), (hi - lo) * sizeof(T));           \
                    for (long k = hi > lo ? hi : lo; k < wp; k++) r[k] = 0;                               \
                }                                                                                         \
                const T *r0 = row, *r1 = row + wp, *r2 = row + 2 * wp, *r3 = row + 3 * wp;                \
                for (long k = 0; k < half; k++) { /* B^T d: rows (0 - 2, 1 + 2, 2 - 1, 1 - 3) */          \
                    long a = 2 * k, b = a + 1;                                                            \
                    e[k] = r0[a] - r2[a]; e[half + k] = r0[b] - r2[b];                                    \
                    e[2 * half + k] = r1[a] + r2[a]; e[3 * half + k] = r1[b] + r2[b];                     \
                    e[4 * half + k] = r2[a] - r1[a]; e[5 * half + k] = r2[b] - r1[b];                     \
                    e[6 * half + k] = r1[a] - r3[a]; e[7 * half + k] = r1[b] - r3[b];                     \
                }                                                                                         \
                T *q = v + t - tw0;                                                                       \
                for (int i = 0; i < 4; i++) { /* (B^T d) B: columns (0 - 2, 1 + 2, 2 - 1, 1 - 3) */       \
                    const T *ev = e + 2 * i * half, *od = ev + half;                                      \
                    T *q0 = q + (i * 4) * n, *q1 = q0 + n, *q2 = q1 + n, *q3 = q2 + n;                    \
                    for (long tw = tw0; tw < tw1; tw++) {                                                 \
                        q0[tw] = ev[tw] - ev[tw + 1];                                                     \
                        q1[tw] = od[tw] + ev[tw + 1];                                                     \
                        q2[tw] = ev[tw + 1] - od[tw];                                                     \
                        q3[tw] = od[tw] - od[tw + 1];                                                     \
                    }                                                                                     \
                }                                                                                         \
                t += tw1 - tw0;                                                                           \
            }                                                                                             \
        }                                                                                                 \
    }                                                                                                     \
    void mt_col2im_##S(const T *cols, T *x, long C, long H, long W, long kh, long kw, long sh, long sw,   \
                       long ph, long pw, long dh, long dw, long OH, long OW, int nt) {                    \
        (void)nt; /* without OpenMP */                                                                    \
        MT_OMP("omp parallel for num_threads(nt) if(nt > 1 && C * kh * kw * OH * OW > 65536)")           \
        for (long c = 0; c < C; c++)                                                                      \
            for (long i = 0; i < kh; i++) {                                                               \
                long offh = i * dh - ph, oh0, oh1;                                                        \
                mt_span(offh, sh, H, 0, OH, &oh0, &oh1); /* the output rows that read inside the image */ \
                for (long j = 0; j < kw; j++) {                                                           \
                    long offw = j * dw - pw, ow0, ow1;                                                    \
                    mt_span(offw, sw, W, 0, OW, &ow0, &ow1);                                              \
                    const T *src = cols + ((c * kh + i) * kw + j) * OH * OW;                              \
                    for (long oh = oh0; oh < oh1; oh++) {                                                 \
                        const T *s = src + oh * OW;                                                       \
                        T *d = x + c * H * W + (oh * sh + offh) * W; /* the image row output row oh reads */ \
                        for (long ow = ow0; ow < ow1; ow++) d[ow * sw + offw] += s[ow];                   \
                    }                                                                                     \
                }                                                                                         \
            }                                                                                             \
    }                                                                                                     \
    void mt_pool_part_##S(const T *x, T *y, long L, long H, long W, long kh, long kw, long sh, long sw,   \
                          long ph, long pw, long dh, long dw, long OH, long OW, int is_max,              \
                          int include_pad, long part, long nparts) {                                     \
        long l0, l1;                                                                                      \
        mt_part_range(L, part, nparts, 1, &l0, &l1);                                                      \
        /* outputs whose window lies inside the row horizontally: ow in [wlo, whi) */                     \
        long wlo = sw > 0 ? (pw + sw - 1) / sw : 0, whi = OW;                                             \
        while (whi > wlo && (whi - 1) * sw - pw + (kw - 1) * dw >= W) whi--;                              \
        if (wlo > OW) wlo = OW;                                                                           \
        for (long l = l0; l < l1; l++) {                                                                  \
            const T *src = x + l * H * W;                                                                 \
            T *dst = y + l * OH * OW;                                                                     \
            for (long oh = 0; oh < OH; oh++) {                                                            \
                long h0 = oh * sh - ph, i0 = 0, i1 = kh;                                                  \
                while (i0 < kh && h0 + i0 * dh < 0) i0++;                                                 \
                while (i1 > i0 && h0 + (i1 - 1) * dh >= H) i1--;                                          \
                T *out = dst + oh * OW;                                                                   \
                for (long ow = 0; ow < OW; ow++) {                                                        \
                    if (ow == wlo && wlo < whi) { /* interior columns: no bounds checks */                \
                        if (is_max) {                                                                     \
                            for (long q = wlo; q < whi; q++) out[q] = -INFINITY;                          \
                            for (long i = i0; i < i1; i++) {                                              \
                                const T *row = src + (h0 + i * dh) * W - pw;                              \
                                for (long j = 0; j < kw; j++) {                                           \
                                    const T *r = row + j * dw;                                            \
                                    if (sw == 1) MT_MAX_ROW(T, S, out, r, wlo, whi, 1)                    \
                                    else if (sw == 2) MT_MAX_ROW(T, S, out, r, wlo, whi, 2)               \
                                    else MT_MAX_ROW(T, S, out, r, wlo, whi, sw)                           \
                                }                                                                         \
                            }                                                                             \
                        } else {                                                                          \
                            double div = (double)(include_pad ? kh * kw : (i1 - i0) * kw);                \
                            for (long q = wlo; q < whi; q++) {                                            \
                                double total = 0;                                                         \
                                for (long i = i0; i < i1; i++) {                                          \
                                    const T *r = src + (h0 + i * dh) * W - pw + q * sw;                   \
                                    for (long j = 0; j < kw; j++) total += r[j * dw];                     \
                                }                                                                         \
                                out[q] = (T)(total / div);                                                \
                            }                                                                             \
                        }                                                                                 \
                        ow = whi - 1;                                                                     \
                        continue;                                                                         \
                    }                                                                                     \
                    T best = -INFINITY; double total = 0; long count = 0;                                 \
                    for (long i = i0; i < i1; i++) {                                                      \
                        long h = h0 + i * dh;                                                             \
                        for (long j = 0; j < kw; j++) {                                                   \
                            long w = ow * sw - pw + j * dw;                                               \
                            if (w < 0 || w >= W) continue;                                                \
                            T v = src[h * W + w];                                                         \
                            if (v > best || v != v) best = v;                                             \
                            total += v; count++;                                                          \
                        }                                                                                 \
                    }                                                                                     \
                    out[ow] = is_max ? best : (T)(total / (double)(include_pad ? kh * kw : count));        \
                }                                                                                         \
            }                                                                                             \
        }                                                                                                 \
    }                                                                                                     \
    void mt_pool_##S(const T *x, T *y, long L, long H, long W, long kh, long kw, long sh, long sw,        \
                     long ph, long pw, long dh, long dw, long OH, long OW, int is_max, int include_pad,  \
                     int nt) {                                                                            \
        if (nt > L) nt = (int)L;                                                                          \
        if (nt <= 1 || L * OH * OW * kh * kw <= 65536) {                                                  \
            mt_pool_part_##S(x, y, L, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, is_max, include_pad,  \
                             0, 1);                                                                       \
            return;                                                                                       \
        }                                                                                                 \
        MT_OMP("omp parallel num_threads(nt)")                                                           \
        {                                                                                                 \
            long part = 0, nparts = 1;                                                                    \
            MT_PART(part, nparts);                                                                        \
            mt_pool_part_##S(x, y, L, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, is_max, include_pad,  \
                             part, nparts);                                                               \
        }                                                                                                 \
    }                                                                                                     \
    void mt_pool_grad_##S(const T *g, const T *x, T *dx, long L, long H, long W, long kh, long kw,        \
                          long sh, long sw, long ph, long pw, long dh, long dw, long OH, long OW,         \
                          int is_max, int include_pad, int nt) {                                          \
        (void)nt; /* without OpenMP */                                                                    \
        MT_OMP("omp parallel for num_threads(nt) if(nt > 1 && L * OH * OW * kh * kw > 65536)")          \
        for (long l = 0; l < L; l++) {                                                                    \
            const T *src = x + l * H * W;                                                                 \
            const T *go = g + l * OH * OW;                                                                \
            T *dst = dx + l * H * W;                                                                      \
            for (long i = 0; i < H * W; i++) dst[i] = 0;                                                  \
            for (long oh = 0; oh < OH; oh++)                                                              \
                for (long ow = 0; ow < OW; ow++) {                                                        \
                    long arg = -1, count = 0; T best = -INFINITY;                                         \
                    for (long i = 0; i < kh; i++) {                                                       \
                        long h = oh * sh - ph + i * dh;                                                   \
                        if (h < 0 || h >= H) continue;                                                    \
                        for (long j = 0; j < kw; j++) {                                                   \
                            long w = ow * sw - pw + j * dw;                                               \
                            if (w < 0 || w >= W) continue;                                                \
                            count++;                                                                      \
                            if (arg < 0 || src[h * W + w] > best) { best = src[h * W + w]; arg = h * W + w; } \
                        }                                                                                 \
                    }                                                                                     \
                    T gv = go[oh * OW + ow];                                                              \
                    if (is_max) { if (arg >= 0) dst[arg] += gv; continue; }                               \
                    T share = gv / (T)(include_pad ? kh * kw : count);                                    \
                    for (long i = 0; i < kh; i++) {                                                       \
                        long h = oh * sh - ph + i * dh;                                                   \
                        if (h < 0 || h >= H) continue;                                                    \
                        for (long j = 0; j < kw; j++) {                                                   \
                            long w = ow * sw - pw + j * dw;                                               \
                            if (w >= 0 && w < W) dst[h * W + w] += share;                                 \
                        }                                                                                 \
                    }                                                                                     \
                }                                                                                         \
        }                                                                                                 \
    }

/* ---- Rows (see runtime.h) ---------------------------------------------------------------------- */
void mt_softmax_row_f32(float *v, long n) {
    float mx = -INFINITY;
    int nan = 0;
    MT_OMP("omp simd reduction(max : mx) reduction(| : nan)")
    for (long j = 0; j < n; j++) { /* a max reduction: vectorised without if-conversion */
        nan |= v[j] != v[j];
        mx = mx > v[j] ? mx : v[j];
    }
    mx = mt_sel_f32(nan, NAN, mx);
    double s = 0;
    MT_OMP("omp simd reduction(+ : s)")
    for (long j = 0; j < n; j++) {
        v[j] = mt_exp_f32(v[j] - mx);
        s += v[j];
    }
    double inv = 1 / s;
    for (long j = 0; j < n; j++) v[j] = (float)(v[j] * inv);
}

/* ---- Float GEMM with AVX-512 (compiled where the compiler targets it: -march=native on such a CPU) ---
 * Used instead of BLAS for every float GEMM on one thread (mt_gemm1_f32): OpenBLAS picks its kernels by
 * CPU model and runs its AVX2 ones on CPUs it does not know or when $OPENBLAS_CORETYPE says so (0.3.34
 * on AMD Zen 5: 125 GFLOP/s a core, against 230-250 here on the convolutions' shapes). C is computed in
 * tiles of MT_X_MR rows by up to MT_X_NR columns (24 accumulator registers), over depth blocks of
 * MT_X_KC: the block of B is packed (64 columns per depth step, zeros past N; 64 KB, in L1/L2), the rows
 * of A are read in place (one broadcast per row and depth step). Tails use masked loads and stores, so
 * nothing outside the operands is read or written. */
#if defined(__AVX512F__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MT_X512 1
#define MT_X_MR 6   /* rows of C per tile */
#define MT_X_NR 64  /* columns of C per tile (4 vectors) */
#define MT_X_KC 256 /* depth per packed block of B */

/* C tile [R x (16 NV, the last vector masked by `last`)] = alpha * A rows . bp + beta * C, where element
 * (r, k) of A is a[r * ras + k * kas] and bp holds kc depth steps of 64 columns (beta 0: C not read) */
static inline __attribute__((always_inline)) void mt_x512_tile(int R, int NV, long kc, const float *a, long ras,
                                                             long kas, const float *bp, float *c, long ldc,
                                                             float alpha, float beta, __mmask16 last) {
    __m512 acc[MT_X_MR][4];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
    for (long k = 0; k < kc; k++) {
        __m512 b[4];
        for (int v = 0; v < NV; v++) b[v] = _mm512_load_ps(bp + k * MT_X_NR + 16 * v);
        for (int r = 0; r < R; r++) {
            __m512 x = _mm512_set1_ps(a[r * ras + k * kas]);
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(x, b[v], acc[r][v]);
        }
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) {
            __mmask16 m = v == NV - 1 ? last : (__mmask16)0xffff;
            float *out = c + r * ldc + 16 * v;
            __m512 y = _mm512_mul_ps(va, acc[r][v]);
            if (beta != 0) y = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, out), y);
            _mm512_mask_storeu_ps(out, m, y);
        }
}

/* mt_x512_tile with R (1, 2, 4 or MT_X_MR) and NV (1 .. 4) as constants, so its loops unroll into registers */
static void mt_x512_rows(int R, int NV, long kc, const float *a, long ras, long kas, const float *bp, float *c,
                         long ldc, float alpha, float beta, __mmask16 last) {
#define MT_X_CASE(R_, NV_)                                                                                 \
    case R_ * 8 + NV_: mt_x512_tile(R_, NV_, kc, a, ras, kas, bp, c, ldc, alpha, beta, last); break;
#define MT_X_ROW(R_) MT_X_CASE(R_, 1) MT_X_CASE(R_, 2) MT_X_CASE(R_, 3) MT_X_CASE(R_, 4)
    switch (R * 8 + NV) {
        MT_X_ROW(1) MT_X_ROW(2) MT_X_ROW(4) MT_X_ROW(6) /* the row counts mt_sgemm_x512 passes */
    default: break;
    }
#undef MT_X_ROW
#undef MT_X_CASE
}

/* out[g] = lane g of each of the 8 rows r[0..7] (an 8 x 8 transpose of 32-bit lanes) */
static inline void mt_transpose8_epi32(const __m256i r[8], __m256i out[8]) {
    __m256i t[8], q[8];
    for (int i = 0; i < 4; i++) { /* pairs of rows interleaved: lanes (0, 1), (4, 5) of each 128-bit half */
        t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) { /* rows 4i .. 4i+3: q[4i + c] holds lane c (low half) and c + 4 (high) */
        q[4 * i] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        q[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        q[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        q[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int c = 0; c < 4; c++) {
        out[c] = _mm256_permute2x128_si256(q[c], q[4 + c], 0x20);
        out[c + 4] = _mm256_permute2x128_si256(q[c], q[4 + c], 0x31);
    }
}

/* rows k0 .. k0+kc-1 and columns j0 .. j0+n-1 (n <= 64) of op(B) into bp[k][64], zeros past n */
static void mt_x512_pack_b(int tb, const float *B, long ldb, long k0, long kc, long j0, long n, float *bp) {
    if (!tb) {
        for (long k = 0; k < kc; k++) {
            const float *src = B + (k0 + k) * ldb + j0;
            float *dst = bp + k * MT_X_NR;
            for (long j = 0; j < MT_X_NR; j += 16) {
                long left = n - j; /* columns of B left from j (none: zeros, nothing read) */
                __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (left > 0 ? left : 0)) - 1);
                _mm512_store_ps(dst + j, left > 0 ? _mm512_maskz_loadu_ps(m, src + j) : _mm512_setzero_ps());
            }
        }
        return;
    }
    if (n < MT_X_NR) memset(bp, 0, sizeof(float) * MT_X_NR * kc);
    long j = 0, k8 = kc / 8 * 8;
    for (; j + 8 <= n; j += 8) { /* op(B)[k, j] = B[j, k]: blocks of 8 x 8 transposed in registers */
        const float *src = B + (j0 + j) * ldb + k0;
        for (long k = 0; k < k8; k += 8) {
            __m256i rows[8], cols[8];
            for (int r = 0; r < 8; r++) rows[r] = _mm256_castps_si256(_mm256_loadu_ps(src + r * ldb + k));
            mt_transpose8_epi32(rows, cols);
            for (int c = 0; c < 8; c++) _mm256_storeu_ps(bp + (k + c) * MT_X_NR + j, _mm256_castsi256_ps(cols[c]));
        }
        for (int r = 0; r < 8; r++)
            for (long k = k8; k < kc; k++) bp[k * MT_X_NR + j + r] = src[r * ldb + k];
    }
    for (; j < n; j++) { /* the columns left: each source row read in order */
        const float *src = B + (j0 + j) * ldb + k0;
        for (long k = 0; k < kc; k++) bp[k * MT_X_NR + j] = src[k];
    }
}

/* C = alpha op(A) op(B) + beta C on the calling thread (row-major; M, N, K > 0) */
static void mt_sgemm_x512(int ta, int tb, long M, long N, long K, float alpha, const float *A, long lda,
                          const float *B, long ldb, float beta, float *C, long ldc) {
    float bp[MT_X_KC * MT_X_NR] __attribute__((aligned(64)));
    long ras = ta ? 1 : lda, kas = ta ? lda : 1;
    for (long k0 = 0; k0 < K; k0 += MT_X_KC) {
        long kc = K - k0 < MT_X_KC ? K - k0 : MT_X_KC;
        float b = k0 > 0 ? 1.0f : beta; /* later depth blocks add to what the first wrote */
        for (long j0 = 0; j0 < N; j0 += MT_X_NR) {
            long n = N - j0 < MT_X_NR ? N - j0 : MT_X_NR;
            __mmask16 last = (__mmask16)(n % 16 ? (1u << (n % 16)) - 1 : 0xffff);
            mt_x512_pack_b(tb, B, ldb, k0, kc, j0, n, bp);
            for (long i = 0, R; i < M; i += R) { /* tiles of 6 rows, the rest as 4, 2 and 1 */
                R = M - i >= MT_X_MR ? MT_X_MR : M - i >= 4 ? 4 : M - i >= 2 ? 2 : 1;
                mt_x512_rows((int)R, (int)((n + 15) / 16), kc, A + i * ras + k0 * kas, ras, kas, bp, C + i * ldc + j0,
                             ldc, alpha, b, last);
            }
        }
    }
}
#define MT_X512_S mt_sgemm_x512(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); return;
#else
#define MT_X512_S
#endif

#ifdef MT_USE_BLAS
#define MT_BLAS_S cblas_sgemm(MT_BLAS_ORDER(101), MT_BLAS_TRANS(ta ? 112 : 111), MT_BLAS_TRANS(tb ? 112 : 111), (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc); return;
#define MT_BLAS_D cblas_dgemm(MT_BLAS_ORDER(101), MT_BLAS_TRANS(ta ? 112 : 111), MT_BLAS_TRANS(tb ? 112 : 111), (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc); return;
#else
#define MT_BLAS_S
#define MT_BLAS_D
#endif

MT_GEMV_DEFINE(float, f32, mt_vf32)
MT_GEMV_DEFINE(double, f64, mt_vf64)
MT_DEFINE(float, f32, MT_X512_S MT_BLAS_S)
MT_DEFINE(double, f64, MT_BLAS_D)

/* ---- Block-quantized weights (see runtime.h) ------------------------------------------------------
 * A product of a quantized weight row with an activation row quantizes the activation row to q8_0
 * (mt_quantize_act_q8_0), then sums over the blocks d_w * d_x * (the block's integer dot product), in 8
 * float lanes (lane l holds the products 4l .. 4l+3 of every block, each block added with one fused
 * multiply-add) that are added pairwise at the end: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
 * The integer parts are exact whatever instructions compute them; this order of the float additions is
 * the one of ggml's x86 CPU kernels, so a GGML graph and the C code give the same bits (tests check it
 * against ggml-python's vec_dot). */
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MT_Q_AVX2 1
#endif

/* keeps x in a register as computed (no fused multiply-add across it: the quantizers round as NumPy) */
#if defined(__GNUC__) || defined(__clang__)
#if defined(__x86_64__) || defined(__i386__)
#define MT_ROUNDED(x) __asm__("" : "+x"(x))
#else
#define MT_ROUNDED(x) __asm__("" : "+w"(x))
#endif
#else
#define MT_ROUNDED(x) do { } while (0)
#endif

float mt_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu, bits;
    if (exponent == 0x1f) bits = sign | 0x7f800000u | (mantissa << 13);
    else if (exponent) bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    else {
        float f = (float)mantissa * 0x1p-24f; /* zero or subnormal: exact */
        return sign ? -f : f;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t mt_float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);             /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);            /* rounds to infinity */
    if (ax < 0x38800000u) {                                               /* below 2^-14: subnormal or 0 */
        float v;
        memcpy(&v, &ax, sizeof v);
        v *= 0x1p24f;                                                     /* exact: v < 1024 */
        uint32_t q = (uint32_t)v;
        float rest = v - (float)q;
        if (rest > 0.5f || (rest == 0.5f && (q & 1u))) q++;               /* to nearest, ties to even */
        return (uint16_t)(sign | q);
    }
    uint32_t r = ax + 0x0fffu + ((ax >> 13) & 1u);                       /* to nearest even at bit 13 */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

void mt_quantize_act_q8_0(const float *x, mt_block_q8_0 *y, long k) {
    for (long b = 0; b < k / MT_QK; b++) {
        const float *v = x + b * MT_QK;
        float amax = 0;
        for (int j = 0; j < MT_QK; j++) {
            float a = fabsf(v[j]);
            amax = a > amax ? a : amax;
        }
        float id = amax != 0 ? 127.0f / amax : 0.0f;
        y[b].d = mt_float_to_half(amax / 127.0f);
        for (int j = 0; j < MT_QK; j++) {
            float q = rintf(v[j] * id); /* to nearest, ties to even (the default rounding mode) */
            y[b].qs[j] = (int8_t)(q > 127 ? 127 : q < -127 ? -127 : (q == q ? q : 0));
        }
    }
}

/* the weight quantizers of runtime.h (as mithril_backend_c.quantize.quantize rounds); with AVX2 the vector
 * versions below are used */
#ifndef MT_Q_AVX2
static void mt_quantize_row_q8_0(const float *x, mt_block_q8_0 *y, long k) {
    for (long b = 0; b < k / MT_QK; b++) {
        const float *v = x + b * MT_QK;
        float amax = 0;
        for (int j = 0; j < MT_QK; j++) amax = fabsf(v[j]) > amax ? fabsf(v[j]) : amax;
        float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = mt_float_to_half(d);
        float q[MT_QK];
        for (int j = 0; j < MT_QK; j++) { /* branch-free, so that it vectorises */
            float p = v[j] * id, t = truncf(p); /* to nearest, ties away from zero (roundf, inlined) */
            float up = fabsf(p - t) >= 0.5f ? 1.0f : 0.0f;
            float r = t + copysignf(up, p);
            q[j] = r != r ? 0.0f : fminf(fmaxf(r, -127.0f), 127.0f); /* NaN: 0 */
        }
        for (int j = 0; j < MT_QK; j++) y[b].qs[j] = (int8_t)(int)q[j];
    }
}

static void mt_quantize_row_q4_0(const float *x, mt_block_q4_0 *y, long k) {
    for (long b = 0; b < k / MT_QK; b++) {
        const float *v = x + b * MT_QK;
        float amax = 0, max = 0;
        for (int j = 0; j < MT_QK; j++)
            if (fabsf(v[j]) > amax) { amax = fabsf(v[j]); max = v[j]; }
        float d = max / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = mt_float_to_half(d);
        uint8_t q[MT_QK];
        for (int j = 0; j < MT_QK; j++) {
            float p = v[j] * id;
            MT_ROUNDED(p);
            p += 8.5f;
            q[j] = (uint8_t)(p >= 15 ? 15 : p > 0 ? (int)p : 0); /* truncated; NaN gives 0 */
        }
        for (int j = 0; j < MT_QK / 2; j++) y[b].qs[j] = (uint8_t)(q[j] | (q[j + MT_QK / 2] << 4));
    }
}
#endif

#ifdef MT_Q_AVX2
/* The same rounding 8 values at a time (mt_quantize_weights' rows; the results are the scalar code's). */
static inline float mt_hmax8(__m256 v) {
    float a[8], m = 0;
    _mm256_storeu_ps(a, v);
    for (int i = 0; i < 8; i++) m = a[i] > m ? a[i] : m;
    return m;
}
/* 4 x 8 floats (integral values in [-128, 127]) as 32 signed bytes, in order */
static inline __m256i mt_pack_bytes(__m256 q0, __m256 q1, __m256 q2, __m256 q3) {
    __m256i a = _mm256_packs_epi32(_mm256_cvttps_epi32(q0), _mm256_cvttps_epi32(q1));
    __m256i b = _mm256_packs_epi32(_mm256_cvttps_epi32(q2), _mm256_cvttps_epi32(q3));
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
static void mt_quantize_rows_q8_0_avx2(const float *x, mt_block_q8_0 *y, long k) {
    const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    for (long b = 0; b < k / MT_QK; b++) {
        __m256 v[4], q[4];
        __m256 amax = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + b * MT_QK + 8 * i);
            amax = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), amax); /* NaN ignored, as the scalar code */
        }
        float m = mt_hmax8(amax), d = m / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = mt_float_to_half(d);
        for (int i = 0; i < 4; i++) {
            __m256 p = _mm256_mul_ps(v[i], _mm256_set1_ps(id));
            __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(p, t)), half, _CMP_GE_OQ);
            __m256 r = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(one, _mm256_and_ps(sign, p))));
            r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
            q[i] = _mm256_and_ps(r, _mm256_cmp_ps(p, p, _CMP_ORD_Q)); /* NaN: 0 */
        }
        _mm256_storeu_si256((__m256i *)y[b].qs, mt_pack_bytes(q[0], q[1], q[2], q[3]));
    }
}
static void mt_quantize_rows_q4_0_avx2(const float *x, mt_block_q4_0 *y, long k) {
    for (long b = 0; b < k / MT_QK; b++) {
        const float *v = x + b * MT_QK;
        const __m256 sign = _mm256_set1_ps(-0.0f);
        __m256 amax = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) amax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(v + 8 * i)), amax);
        float m = mt_hmax8(amax), max = 0;
        for (int j = 0; j < MT_QK; j++) /* the first value of that magnitude, with its sign */
            if (fabsf(v[j]) == m) { max = v[j]; break; }
        float d = max / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = mt_float_to_half(d);
        __m256 q[4];
        for (int i = 0; i < 4; i++) {
            __m256 p = _mm256_mul_ps(_mm256_loadu_ps(v + 8 * i), _mm256_set1_ps(id));
            MT_ROUNDED(p); /* not fused with the addition */
            p = _mm256_add_ps(p, _mm256_set1_ps(8.5f));
            __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            t = _mm256_min_ps(_mm256_max_ps(t, _mm256_setzero_ps()), _mm256_set1_ps(15.0f));
            q[i] = _mm256_and_ps(t, _mm256_cmp_ps(p, p, _CMP_ORD_Q)); /* NaN: 0 */
        }
        uint8_t bytes[MT_QK];
        _mm256_storeu_si256((__m256i *)bytes, mt_pack_bytes(q[0], q[1], q[2], q[3]));
        for (int j = 0; j < MT_QK / 2; j++) y[b].qs[j] = (uint8_t)(bytes[j] | (bytes[j + MT_QK / 2] << 4));
    }
}
#endif

void mt_quantize_weights(int format, const float *x, void *y, long rows, long k, int nt) {
    long row_bytes = (k / MT_QK) * (format == MT_Q8_0 ? (long)sizeof(mt_block_q8_0) : (long)sizeof(mt_block_q4_0));
    (void)nt; /* without OpenMP */
    MT_OMP("omp parallel for schedule(static) num_threads(nt) if(nt > 1 && rows * k > 65536)")
    for (long r = 0; r < rows; r++) {
        void *row = (char *)y + r * row_bytes;
#ifdef MT_Q_AVX2
        if (format == MT_Q8_0) mt_quantize_rows_q8_0_avx2(x + r * k, (mt_block_q8_0 *)row, k);
        else mt_quantize_rows_q4_0_avx2(x + r * k, (mt_block_q4_0 *)row, k);
#else
        if (format == MT_Q8_0) mt_quantize_row_q8_0(x + r * k, (mt_block_q8_0 *)row, k);
        else mt_quantize_row_q4_0(x + r * k, (mt_block_q4_0 *)row, k);
#endif
    }
}

/* the pairwise sum of 8 lanes (see above) */
static inline float mt_lanes_sum(const float a[8]) {
    float r0 = a[0] + a[4], r1 = a[1] + a[5], r2 = a[2] + a[6], r3 = a[3] + a[7];
    return (r0 + r2) + (r1 + r3);
}

/* The quantized activations of mt_qlinear_f32 (in its scratch space): per row and block, a 64-byte line
 * holding the block's 32 q8_0 values, then 8 corrections c[l] = -k * (sum of the values 4l .. 4l+3) as
 * int32, so that the integer lane l of a weight block is c[l] + sum of u[j] * x[j] with u the weight's
 * values made unsigned (q4_0: the nibble, k = 8; q8_0: the value + 128, k = 128, used with VNNI's unsigned
 * x signed products); and the blocks' scales as floats. Block i of row m is i = m * nb + b. */
typedef struct {
    int8_t *v; /* [blocks][64] */
    float *d;  /* [blocks] */
} mt_qacts;
#define MT_QACT_X(a, i) ((a).v + 64 * (i))                        /* the 32 values of block i */
#define MT_QACT_C(a, i) ((const int32_t *)((a).v + 64 * (i) + 32)) /* its 8 corrections */

#ifdef MT_Q_AVX2
static inline float mt_hsum8(__m256 v) {
    float a[8];
    _mm256_storeu_ps(a, v);
    return mt_lanes_sum(a);
}
#if defined(__AVXVNNI__)
#define MT_VNNI(c, u, x) _mm256_dpbusd_avx_epi32((c), (u), (x))
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define MT_VNNI(c, u, x) _mm256_dpbusd_epi32((c), (u), (x))
#endif
/* c + the lanes of u (unsigned bytes, < 128 without VNNI) times x (signed bytes) */
static inline __m256i mt_lanes_unsigned(__m256i c, __m256i u, __m256i x) {
#ifdef MT_VNNI
    return MT_VNNI(c, u, x);
#else
    return _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)));
#endif
}
/* the 32 values of a q4_0 block as unsigned bytes (the nibbles: value j low in byte j, j + 16 high) */
static inline __m256i mt_unsigned_Q4_0(const mt_block_q4_0 *w) {
    __m128i t = _mm_loadu_si128((const __m128i *)w->qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f));
}
/* the 32 values of a q8_0 block as unsigned bytes (value + 128) */
static inline __m256i mt_unsigned_Q8_0(const mt_block_q8_0 *w) {
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)w->qs), _mm256_set1_epi8((char)0x80));
}
/* the integer lanes of a weight block with activations x (c: their correction) */
static inline __m256i mt_lanes_Q4_0(const mt_block_q4_0 *w, __m256i x, __m256i c) {
    return mt_lanes_unsigned(c, mt_unsigned_Q4_0(w), x);
}
static inline __m256i mt_lanes_Q8_0(const mt_block_q8_0 *w, __m256i x, __m256i c) {
#ifdef MT_VNNI
    return MT_VNNI(c, mt_unsigned_Q8_0(w), x);
#else
    __m256i v = _mm256_loadu_si256((const __m256i *)w->qs);
    (void)c; /* |w| times x * sign(w) */
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(x, v)),
                             _mm256_set1_epi16(1));
#endif
}
#define MT_QDOT_DEFINE(F, BLOCK)                                                                           \
    /* s[r] = dot(weight row w, activation row r of a), r < R <= 4 */                                  \
    static inline void mt_qdot_##F(const BLOCK *w, long nb, int R, mt_qacts a, float *s) {                \
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}; \
        if (R == 1) { /* a decode step: memory-bound, the loop kept minimal */                          \
            for (long b = 0; b < nb; b++) {                                                               \
                __m256i x = _mm256_load_si256((const __m256i *)MT_QACT_X(a, b));                          \
                __m256i c = _mm256_load_si256((const __m256i *)MT_QACT_C(a, b));                          \
                __m256 d = _mm256_set1_ps(_cvtsh_ss(w[b].d) * a.d[b]);                                    \
                acc[0] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(mt_lanes_##F(w + b, x, c)), acc[0]);       \
            }                                                                                             \
            s[0] = mt_hsum8(acc[0]);                                                                      \
            return;                                                                                       \
        }                                                                                                 \
        for (long b = 0; b < nb; b++) {                                                                   \
            float dw = _cvtsh_ss(w[b].d);                                                                 \
            for (int r = 0; r < 4; r++) {                                                                 \
                if (r >= R) break;                                                                        \
                long i = r * nb + b;                                                                      \
                __m256i x = _mm256_load_si256((const __m256i *)MT_QACT_X(a, i));                          \
                __m256i c = _mm256_load_si256((const __m256i *)MT_QACT_C(a, i));                          \
                __m256 d = _mm256_set1_ps(dw * a.d[i]);                                                   \
                acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(mt_lanes_##F(w + b, x, c)), acc[r]);       \
            }                                                                                             \
        }                                                                                                 \
        for (int r = 0; r < R; r++) s[r] = mt_hsum8(acc[r]);                                              \
    }
#else
#define MT_W_VALUE_Q8_0(blk, j) ((int)(blk).qs[j])
#define MT_W_VALUE_Q4_0(blk, j) ((int)(((j) < 16 ? (blk).qs[j] : (blk).qs[(j) - 16] >> 4) & 15) - 8)
#define MT_QDOT_DEFINE(F, BLOCK)                                                                           \
    static inline void mt_qdot_##F(const BLOCK *w, long nb, int R, mt_qacts a, float *s) {                \
        for (int r = 0; r < R; r++) {                                                                     \
            float acc[8] = {0};                                                                           \
            for (long b = 0; b < nb; b++) {                                                               \
                float d = mt_half_to_float(w[b].d) * a.d[r * nb + b];                                     \
                const int8_t *q = MT_QACT_X(a, r * nb + b);                                               \
                for (int l = 0; l < 8; l++) {                                                             \
                    int t = 0;                                                                            \
                    for (int j = 4 * l; j < 4 * l + 4; j++) t += MT_W_VALUE_##F(w[b], j) * q[j];           \
                    acc[l] = fmaf(d, (float)t, acc[l]); /* fused, as the vector code */                   \
                }                                                                                         \
            }                                                                                             \
            s[r] = mt_lanes_sum(acc);                                                                     \
        }                                                                                                 \
    }
#endif
MT_QDOT_DEFINE(Q8_0, mt_block_q8_0)
MT_QDOT_DEFINE(Q4_0, mt_block_q4_0)

#define MT_Q_ROWS 4 /* activation rows per pass over a weight row (interleaving weight rows measured 4x slower) */

/* weight row n of W (rows of nb blocks of the format) */
static inline const void *mt_qrow(int format, const void *W, long n, long nb) {
    return format == MT_Q8_0 ? (const void *)((const mt_block_q8_0 *)W + n * nb)
                             : (const void *)((const mt_block_q4_0 *)W + n * nb);
}

/* y[m * ldy] (+)= dot(weight row w, activation row m of a) for m < M, the rows MT_Q_ROWS at a time */
static void mt_qdot_rows(int format, const void *w, long nb, mt_qacts a, long M, float *y, long ldy,
                         int accumulate) {
    for (long m = 0; m < M; m += MT_Q_ROWS) {
        int R = M - m < MT_Q_ROWS ? (int)(M - m) : MT_Q_ROWS;
        mt_qacts rows = {MT_QACT_X(a, m * nb), a.d + m * nb};
        float s[MT_Q_ROWS];
        if (format == MT_Q8_0) mt_qdot_Q8_0((const mt_block_q8_0 *)w, nb, R, rows, s);
        else mt_qdot_Q4_0((const mt_block_q4_0 *)w, nb, R, rows, s);
        for (int r = 0; r < R; r++) {
            float *o = y + (m + r) * ldy;
            *o = accumulate ? *o + s[r] : s[r];
        }
    }
}

/* Y[m, n] (+)= dot(weight row n, activation row m) for n in [n0, n1) */
static void mt_qlinear_cols(int format, long M, long N, long nb, mt_qacts a, const void *W, float *Y,
                            int accumulate, long n0, long n1) {
    for (long n = n0; n < n1; n++) mt_qdot_rows(format, mt_qrow(format, W, n, nb), nb, a, M, Y + n, N, accumulate);
}

#if defined(MT_Q_AVX2) && defined(__AVX512F__) && defined(__AVX512VNNI__)
/* Several activation rows (a prefill step): strips of 16 weight rows, one per 32-bit lane of a 512-bit
 * register. A strip's weights are unpacked once per call into a panel (per block, 8 groups of 4 values of
 * the 16 rows as unsigned bytes, lane j holding row j's; then the 16 scales as floats) that every tile of up
 * to 8 activation rows then reads: per block and activation row, 8 VNNI products (each group's 4 activation
 * bytes broadcast to the 16 lanes) give the 16 rows' integer dot products at once, converted and scaled in
 * one multiply-add. The integer dot product of a block is exact, so each output is the same sum as the
 * one-row kernel's up to the order of float additions (within a few ulp of the scale, not bit for bit). */
#define MT_Q_TILES 1
#define MT_STRIP 16             /* weight rows per strip */
#define MT_STRIP_TILE 8         /* activation rows per tile */
#define MT_STRIP_BLOCK_BYTES 576 /* panel bytes per block: 8 groups x 16 rows x 4 values, then 16 scales */
#define MT_PANEL_BYTES(nb) ((MT_STRIP_BLOCK_BYTES * (nb) + 63) / 64 * 64) /* a thread's panel, whole lines */

/* block b of weight row `row` as unsigned bytes (mt_unsigned_*), and its scale */
static inline __m256i mt_qblock_unsigned(int format, const void *W, long row, long nb, long b, float *d) {
    if (format == MT_Q8_0) {
        const mt_block_q8_0 *w = (const mt_block_q8_0 *)W + row * nb + b;
        *d = _cvtsh_ss(w->d);
        return mt_unsigned_Q8_0(w);
    }
    const mt_block_q4_0 *w = (const mt_block_q4_0 *)W + row * nb + b;
    *d = _cvtsh_ss(w->d);
    return mt_unsigned_Q4_0(w);
}

/* the panel of weight rows n .. n+15 (see above): u[nb][8][16] 4-byte groups, then d[nb][16]. The strip's
 * 16 rows are read from memory as 16 interleaved streams, which the hardware prefetcher does not follow:
 * so the next strip `next` (contiguous; NULL: none), as many bytes per block as this one, is prefetched
 * into L2 while the tiles of this one compute (measured: a 128-token GPT-2 prefill 15% faster; into L1
 * slower, as a panel and a strip of 3072-wide rows do not both fit there) */
static void mt_qpack_strip(int format, const void *W, long n, long nb, unsigned char *panel, const char *next) {
    float *d = (float *)(panel + 512 * nb);
    long step = MT_STRIP * (format == MT_Q8_0 ? (long)sizeof(mt_block_q8_0) : (long)sizeof(mt_block_q4_0));
    for (long b = 0; b < nb; b++) {
        for (long o = 0; next && o < step; o += 64) _mm_prefetch(next + b * step + o, _MM_HINT_T1);
        __m256i rows[16], groups[2][8];
        for (int j = 0; j < 16; j++) rows[j] = mt_qblock_unsigned(format, W, n + j, nb, b, d + 16 * b + j);
        mt_transpose8_epi32(rows, groups[0]);
        mt_transpose8_epi32(rows + 8, groups[1]);
        for (int g = 0; g < 8; g++)
            _mm512_store_si512(panel + 512 * b + 64 * g,
                               _mm512_inserti64x4(_mm512_castsi256_si512(groups[0][g]), groups[1][g], 1));
    }
}

/* Y[m + r, 0 .. 15] (+)= the products of activation rows m + r (r < R) with the strip of panel (nb blocks);
 * k[i]: the correction of activation block i (the sum of its line's 8 corrections) */
static inline __attribute__((always_inline)) void mt_qstrip_tile(const unsigned char *panel, long nb, mt_qacts a,
                                                                 const int32_t *k, long m, int R, float *Y, long ldy,
                                                                 int accumulate) {
    const float *dw = (const float *)(panel + 512 * nb);
    __m512 acc[MT_STRIP_TILE]; /* kept in registers: the loops over r and g unrolled */
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (long b = 0; b < nb; b++) {
        __m512i u[8];
        for (int g = 0; g < 8; g++) u[g] = _mm512_load_si512(panel + 512 * b + 64 * g);
        __m512 d16 = _mm512_load_ps(dw + 16 * b);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            long i = (m + r) * nb + b;
            const int8_t *x = MT_QACT_X(a, i);
            __m512i s = _mm512_set1_epi32(k[i]);
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                int32_t group;
                memcpy(&group, x + 4 * g, sizeof group);
                s = _mm512_dpbusd_epi32(s, u[g], _mm512_set1_epi32(group));
            }
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d16, _mm512_set1_ps(a.d[i])), _mm512_cvtepi32_ps(s), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        float *y = Y + (m + r) * ldy;
        _mm512_storeu_ps(y, accumulate ? _mm512_add_ps(_mm512_loadu_ps(y), acc[r]) : acc[r]);
    }
}

/* Y[m, n] (+)= dot(weight row n, activation row m) for n in [n0, n1) (whole strips), m < M, the strips
 * unpacked in turn into panel (MT_PANEL_BYTES(nb), 64-byte aligned) */
static void mt_qlinear_tiles(int format, long M, long N, long nb, mt_qacts a, const int32_t *k, const void *W,
                             float *Y, int accumulate, long n0, long n1, unsigned char *panel) {
    for (long n = n0; n + MT_STRIP <= n1; n += MT_STRIP) {
        const char *next = n + 2 * MT_STRIP <= n1 ? (const char *)mt_qrow(format, W, n + MT_STRIP, nb) : NULL;
        mt_qpack_strip(format, W, n, nb, panel, next);
        long m = 0;
        for (; m + MT_STRIP_TILE <= M; m += MT_STRIP_TILE)
            mt_qstrip_tile(panel, nb, a, k, m, MT_STRIP_TILE, Y + n, N, accumulate);
        /* the rows left (up to 7) as tiles of 4, 2 and 1: three unrolled bodies, not seven (a smaller binary) */
        if (M - m >= 4) mt_qstrip_tile(panel, nb, a, k, m, 4, Y + n, N, accumulate), m += 4;
        if (M - m >= 2) mt_qstrip_tile(panel, nb, a, k, m, 2, Y + n, N, accumulate), m += 2;
        if (M - m >= 1) mt_qstrip_tile(panel, nb, a, k, m, 1, Y + n, N, accumulate);
    }
}
#endif

/* the activations' lines, scales and corrections (72 bytes per row and block, and 63 to align them), then,
 * for more than one row, room for min(8, 2 + M / 8) threads' weight panels of 16 rows (MT_PANEL_BYTES(nb)
 * each, 576 bytes per block; the generated code's quantized_scratch computes the same) */
size_t mt_qlinear_scratch(long M, long K) {
    size_t nb = (size_t)(K / MT_QK), rows = (size_t)M * nb * 72 + 64;
    size_t panels = M < 2 ? 0 : (size_t)(M / 8 + 2 < 8 ? M / 8 + 2 : 8);
    return rows + panels * ((576 * nb + 63) / 64 * 64) + 64;
}

/* the quantized activations of `rows` rows of nb blocks laid out in scratch (mt_qlinear_scratch bytes) */
static mt_qacts mt_qacts_in(void *scratch, long rows, long nb) {
    mt_qacts a;
    a.v = (int8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    a.d = (float *)(a.v + 64 * rows * nb);
    return a;
}

#ifdef MT_Q_AVX2
/* one block of 32 floats v as mt_quantize_act_q8_0 rounds it (the same operations, 8 at a time): its
 * line (values, corrections for k) and its scale d (the half, as a float) */
static inline void mt_qact_block(const float *v, int8_t *line, float *d, int32_t k) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 x[4], q[4], amax = _mm256_setzero_ps();
    for (int j = 0; j < 4; j++) {
        x[j] = _mm256_loadu_ps(v + 8 * j);
        amax = _mm256_max_ps(_mm256_andnot_ps(sign, x[j]), amax); /* NaN ignored, as the scalar code */
    }
    float m = mt_hmax8(amax), id = m != 0 ? 127.0f / m : 0.0f;
    *d = mt_half_to_float(mt_float_to_half(m / 127.0f));
    for (int j = 0; j < 4; j++) {
        __m256 p = _mm256_mul_ps(x[j], _mm256_set1_ps(id));
        __m256 r = _mm256_round_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); /* rintf */
        r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
        q[j] = _mm256_and_ps(r, _mm256_cmp_ps(p, p, _CMP_ORD_Q)); /* NaN: 0 */
    }
    __m256i bytes = mt_pack_bytes(q[0], q[1], q[2], q[3]);
    __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), bytes), _mm256_set1_epi16(1));
    _mm256_store_si256((__m256i *)line, bytes);
    _mm256_store_si256((__m256i *)(line + 32), _mm256_mullo_epi32(sums, _mm256_set1_epi32(k)));
}
#else
static inline void mt_qact_block(const float *v, int8_t *line, float *d, int32_t k) {
    mt_block_q8_0 blk;
    mt_quantize_act_q8_0(v, &blk, MT_QK);
    int32_t c[8];
    for (int l = 0; l < 8; l++) c[l] = k * (blk.qs[4 * l] + blk.qs[4 * l + 1] + blk.qs[4 * l + 2] + blk.qs[4 * l + 3]);
    memcpy(line, blk.qs, MT_QK);
    memcpy(line + 32, c, sizeof c);
    *d = mt_half_to_float(blk.d);
}
#endif

/* row m of the activations from the floats x (the lines of its blocks and their scales) */
static void mt_qacts_row(int format, mt_qacts a, long m, long nb, const float *x) {
    int32_t k = format == MT_Q4_0 ? -8 : -128;
    for (long b = 0; b < nb; b++) mt_qact_block(x + b * MT_QK, MT_QACT_X(a, m * nb + b), a.d + m * nb + b, k);
}

void mt_qlinear_f32(int format, long M, long N, long K, const float *X, const void *W, float *Y, int accumulate,
                    void *scratch, int nt) {
    long nb = K / MT_QK;
    mt_qacts a = mt_qacts_in(scratch, M, nb);
    for (long m = 0; m < M; m++) mt_qacts_row(format, a, m, nb, X + m * K);
    long parts = (N + 63) / 64;
    if (nt > parts) nt = (int)parts;
    if (nt <= 1 || M * N * K < MT_GEMV_MIN * 4) nt = 1;
    unsigned char *panels = NULL;
#ifdef MT_Q_TILES
    int32_t *k = (int32_t *)(a.d + M * nb); /* each block's correction, then a panel per thread */
    if (M > 1 && N >= MT_STRIP && nb > 0) {
        panels = (unsigned char *)(((uintptr_t)(k + M * nb) + 63) & ~(uintptr_t)63);
        long fit = (long)(((char *)scratch + mt_qlinear_scratch(M, K) - (char *)panels) / MT_PANEL_BYTES(nb));
        if (fit < 1) panels = NULL; /* (not reached: the space holds 2 panels or more) */
        else if (nt > fit) nt = (int)fit;
        for (long i = 0; panels && i < M * nb; i++) {
            const int32_t *c = MT_QACT_C(a, i);
            k[i] = c[0] + c[1] + c[2] + c[3] + c[4] + c[5] + c[6] + c[7];
        }
    }
#endif
    MT_OMP("omp parallel for schedule(static) num_threads(nt) if(nt > 1)")
    for (int part = 0; part < nt; part++) {
        long lo, hi;
        mt_part_range(N, part, nt, 16, &lo, &hi);
#ifdef MT_Q_TILES
        if (panels) {
            long whole = lo + (hi - lo) / MT_STRIP * MT_STRIP;
            mt_qlinear_tiles(format, M, N, nb, a, k, W, Y, accumulate, lo, whole, panels + part * MT_PANEL_BYTES(nb));
            lo = whole;
        }
#endif
        mt_qlinear_cols(format, M, N, nb, a, W, Y, accumulate, lo, hi);
    }
    (void)panels;
}

size_t mt_qconv_scratch(long K, long pixels) {
    return (size_t)K * sizeof(float) + 64 + mt_qlinear_scratch(pixels, K);
}

void mt_qconv_block_f32(int format, const float *x, const void *W, float *y, long ldy, long C, long H, long Wd,
                        long kh, long kw, long sh, long sw, long ph, long pw, long dh, long dw, long OW, long p0,
                        long p1, long o0, long o1, void *scratch) {
    long K = C * kh * kw, nb = K / MT_QK, n = p1 - p0;
    float *row = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    mt_qacts a = mt_qacts_in(row + K, n, nb);
    for (long p = p0; p < p1; p++) { /* the pixel's patch, in the weight's order (c, i, j), zero outside */
        long oh = p / OW, ow = p - oh * OW;
        for (long c = 0; c < C; c++)
            for (long i = 0; i < kh; i++) {
                long h = oh * sh - ph + i * dh;
                for (long j = 0; j < kw; j++) {
                    long w = ow * sw - pw + j * dw;
                    int inside = h >= 0 && h < H && w >= 0 && w < Wd;
                    row[(c * kh + i) * kw + j] = inside ? x[(c * H + h) * Wd + w] : 0.0f;
                }
            }
        mt_qacts_row(format, a, p - p0, nb, row);
    }
    for (long o = o0; o < o1; o++) mt_qdot_rows(format, mt_qrow(format, W, o, nb), nb, a, n, y + o * ldy + p0, 1, 0);
}

void mt_qrows_f32(int format, const void *W, const int64_t *index, long n, long dim, float *out) {
    long nb = dim / MT_QK;
    for (long i = 0; i < n; i++) {
        float *y = out + i * dim;
        for (long b = 0; b < nb; b++) {
            if (format == MT_Q8_0) {
                const mt_block_q8_0 *blk = (const mt_block_q8_0 *)W + index[i] * nb + b;
                float d = mt_half_to_float(blk->d);
                for (int j = 0; j < MT_QK; j++) y[b * MT_QK + j] = (float)blk->qs[j] * d;
            } else {
                const mt_block_q4_0 *blk = (const mt_block_q4_0 *)W + index[i] * nb + b;
                float d = mt_half_to_float(blk->d);
                for (int j = 0; j < MT_QK / 2; j++) {
                    y[b * MT_QK + j] = (float)((blk->qs[j] & 15) - 8) * d;
                    y[b * MT_QK + j + MT_QK / 2] = (float)((blk->qs[j] >> 4) - 8) * d;
                }
            }
        }
    }
}
