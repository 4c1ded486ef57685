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

/* out[q] = max(out[q], r[q * stride]) for q in [lo, hi), NaN-propagating (a constant stride vectorises) */
#define MT_MAX_ROW(T, out, r, lo, hi, stride)                                                             \
    for (long q = (lo); q < (hi); q++) {                                                                  \
        T v_ = (r)[q * (stride)], b_ = (out)[q];                                                          \
        (out)[q] = (v_ > b_ || v_ != v_) ? v_ : b_;                                                       \
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

#define MT_MB 64
#define MT_NB 256
#define MT_KB 128

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
                T bpack[MT_KB * MT_NB];                                                                   \
                for (long i = m0; i < m1; i++) {                                                          \
                    T *c = C + i * ldc;                                                                   \
                    if (beta == 0) for (long j = n0; j < n1; j++) c[j] = 0;                               \
                    else if (beta != 1) for (long j = n0; j < n1; j++) c[j] *= beta;                      \
                }                                                                                         \
                for (long k0 = 0; k0 < K; k0 += MT_KB) {                                                  \
                    long k1 = k0 + MT_KB < K ? k0 + MT_KB : K, nw = n1 - n0;                              \
                    for (long k = k0; k < k1; k++)                                                        \
                        for (long j = n0; j < n1; j++)                                                    \
                            bpack[(k - k0) * nw + (j - n0)] = tb ? B[j * ldb + k] : B[k * ldb + j];       \
                    for (long i = m0; i < m1; i++) {                                                      \
                        T *restrict c = C + i * ldc + n0;                                                 \
                        for (long k = k0; k < k1; k++) {                                                  \
                            T a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);                         \
                            const T *restrict b = bpack + (k - k0) * nw;                                  \
                            for (long j = 0; j < nw; j++) c[j] += a * b[j];                               \
                        }                                                                                 \
                    }                                                                                     \
                }                                                                                         \
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
                        } else if (sw == 1) {                                                             \
                            const T *s = src + h * W + off; /* s[q] = x[h, q + off] */                    \
                            long lo = -off > ow ? -off : ow, hi = W - off < end ? W - off : end;          \
                            if (lo > end) lo = end;                                                       \
                            if (hi < lo) hi = lo;                                                         \
                            for (long q = ow; q < lo; q++) dd[q] = 0;                                     \
                            if (hi > lo) memcpy(dd + lo, s + lo, (hi - lo) * sizeof(T));                  \
                            for (long q = hi; q < end; q++) dd[q] = 0;                                    \
                        } else {                                                                          \
                            /* q in [lo, hi) reads inside the row: w = q * sw + off in [0, W) */          \
                            const T *s = src + h * W + off;                                               \
                            long lo = off >= 0 ? 0 : (-off + sw - 1) / sw;                                \
                            long hi = W - off > 0 ? (W - off + sw - 1) / sw : 0;                          \
                            if (lo < ow) lo = ow;                                                         \
                            if (lo > end) lo = end;                                                       \
                            if (hi > end) hi = end;                                                       \
                            if (hi < lo) hi = lo;                                                         \
                            for (long q = ow; q < lo; q++) dd[q] = 0;                                     \
                            for (long q = lo; q < hi; q++) dd[q] = s[q * sw];                             \
                            for (long q = hi; q < end; q++) dd[q] = 0;                                    \
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
                for (long oh = 0; oh < OH; oh++) {                                                        \
                    long h = oh * sh - ph + i * dh;                                                       \
                    T *d = dst + oh * OW;                                                                 \
                    if (h < 0 || h >= H) { for (long ow = 0; ow < OW; ow++) d[ow] = 0; continue; }        \
                    const T *s = src + h * W;                                                             \
                    long off = j * dw - pw;                                                               \
                    if (sw == 1 && off >= 0 && off + OW <= W) { memcpy(d, s + off, OW * sizeof(T)); continue; } \
                    for (long ow = 0; ow < OW; ow++) {                                                    \
                        long w = ow * sw + off;                                                           \
                        d[ow] = (w >= 0 && w < W) ? s[w] : 0;                                             \
                    }                                                                                     \
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
            for (long r = 0; r < kh * kw; r++) {                                                          \
                long i = r / kw, j = r % kw;                                                              \
                const T *src = cols + ((c * kh + i) * kw + j) * OH * OW;                                  \
                T *dst = x + c * H * W;                                                                   \
                for (long oh = 0; oh < OH; oh++) {                                                        \
                    long h = oh * sh - ph + i * dh;                                                       \
                    if (h < 0 || h >= H) continue;                                                        \
                    const T *s = src + oh * OW;                                                           \
                    T *d = dst + h * W;                                                                   \
                    for (long ow = 0; ow < OW; ow++) {                                                    \
                        long w = ow * sw - pw + j * dw;                                                   \
                        if (w >= 0 && w < W) d[w] += s[ow];                                               \
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
                                    if (sw == 1) MT_MAX_ROW(T, out, r, wlo, whi, 1)                       \
                                    else if (sw == 2) MT_MAX_ROW(T, out, r, wlo, whi, 2)                  \
                                    else MT_MAX_ROW(T, out, r, wlo, whi, sw)                              \
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

#ifdef MT_USE_BLAS
#define MT_BLAS_S cblas_sgemm(MT_BLAS_ORDER(101), MT_BLAS_TRANS(ta ? 112 : 111), MT_BLAS_TRANS(tb ? 112 : 111), (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc); return;
#define MT_BLAS_D cblas_dgemm(MT_BLAS_ORDER(101), MT_BLAS_TRANS(ta ? 112 : 111), MT_BLAS_TRANS(tb ? 112 : 111), (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc); return;
#else
#define MT_BLAS_S
#define MT_BLAS_D
#endif

MT_GEMV_DEFINE(float, f32, mt_vf32)
MT_GEMV_DEFINE(double, f64, mt_vf64)
MT_DEFINE(float, f32, MT_BLAS_S)
MT_DEFINE(double, f64, MT_BLAS_D)
