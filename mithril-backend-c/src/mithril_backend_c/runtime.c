/* Mithril C runtime (see runtime.h). MT_USE_BLAS selects CBLAS GEMM; otherwise a blocked, vectorisable
 * fallback parallelised with OpenMP.
 *
 * BLAS flavours (chosen by toolchain.py, or by hand when building an exported model):
 *   -DMT_USE_BLAS                    any CBLAS (-lopenblas, -lcblas -lblas, -lblas, ...);
 *   -DMT_BLAS_OPENBLAS               ... which is OpenBLAS: its thread count follows each call's nt;
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
/* OpenBLAS runs its own thread pool: give it the caller's nt so BLAS and OpenMP threads never add up
 * to more than nt busy threads. Reading the count is a load of a global; it is only set when it changed. */
#define MT_BLAS_THREADS(nt) do { if (openblas_get_num_threads() != (nt)) openblas_set_num_threads(nt); } while (0)
#else
#define MT_BLAS_THREADS(nt) do { (void)(nt); } while (0)
#endif

#define MT_MB 64
#define MT_NB 256
#define MT_KB 128

#define MT_DEFINE(T, S, BLASFN)                                                                            \
    static void mt_gemm_fallback_##S(int ta, int tb, long M, long N, long K, T alpha, const T *A, long lda, \
                                     const T *B, long ldb, T beta, T *C, long ldc, int nt) {             \
        long mblocks = (M + MT_MB - 1) / MT_MB, nblocks = (N + MT_NB - 1) / MT_NB;                        \
        _Pragma("omp parallel for collapse(2) schedule(static) num_threads(nt) if(nt > 1 && M * N * K > 262144)") \
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
    void mt_gemm_##S(int ta, int tb, long M, long N, long K, T alpha, const T *A, long lda, const T *B,   \
                     long ldb, T beta, T *C, long ldc, int nt) {                                          \
        if (M <= 0 || N <= 0) return;                                                                     \
        if (K <= 0) {                                                                                     \
            for (long i = 0; i < M; i++)                                                                  \
                for (long j = 0; j < N; j++) C[i * ldc + j] = beta == 0 ? 0 : beta * C[i * ldc + j];      \
            return;                                                                                       \
        }                                                                                                 \
        BLASFN                                                                                            \
        mt_gemm_fallback_##S(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nt);                   \
    }                                                                                                     \
    void mt_im2col_##S(const T *x, T *cols, long C, long H, long W, long kh, long kw, long sh, long sw,   \
                       long ph, long pw, long dh, long dw, long OH, long OW, int nt) {                    \
        _Pragma("omp parallel for collapse(2) num_threads(nt) if(nt > 1 && C * kh * kw * OH * OW > 65536)") \
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
    void mt_col2im_##S(const T *cols, T *x, long C, long H, long W, long kh, long kw, long sh, long sw,   \
                       long ph, long pw, long dh, long dw, long OH, long OW, int nt) {                    \
        _Pragma("omp parallel for num_threads(nt) if(nt > 1 && C * kh * kw * OH * OW > 65536)")           \
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
    void mt_pool_##S(const T *x, T *y, long L, long H, long W, long kh, long kw, long sh, long sw,        \
                     long ph, long pw, long dh, long dw, long OH, long OW, int is_max, int include_pad,  \
                     int nt) {                                                                            \
        _Pragma("omp parallel for num_threads(nt) if(nt > 1 && L * OH * OW * kh * kw > 65536)")          \
        for (long l = 0; l < L; l++) {                                                                    \
            const T *src = x + l * H * W;                                                                 \
            T *dst = y + l * OH * OW;                                                                     \
            for (long oh = 0; oh < OH; oh++)                                                              \
                for (long ow = 0; ow < OW; ow++) {                                                        \
                    T best = -INFINITY; double total = 0; long count = 0;                                 \
                    for (long i = 0; i < kh; i++) {                                                       \
                        long h = oh * sh - ph + i * dh;                                                   \
                        if (h < 0 || h >= H) continue;                                                    \
                        for (long j = 0; j < kw; j++) {                                                   \
                            long w = ow * sw - pw + j * dw;                                               \
                            if (w < 0 || w >= W) continue;                                                \
                            T v = src[h * W + w];                                                         \
                            if (v > best || v != v) best = v;                                             \
                            total += v; count++;                                                          \
                        }                                                                                 \
                    }                                                                                     \
                    dst[oh * OW + ow] = is_max ? best : (T)(total / (double)(include_pad ? kh * kw : count)); \
                }                                                                                         \
        }                                                                                                 \
    }                                                                                                     \
    void mt_pool_grad_##S(const T *g, const T *x, T *dx, long L, long H, long W, long kh, long kw,        \
                          long sh, long sw, long ph, long pw, long dh, long dw, long OH, long OW,         \
                          int is_max, int include_pad, int nt) {                                          \
        _Pragma("omp parallel for num_threads(nt) if(nt > 1 && L * OH * OW * kh * kw > 65536)")          \
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
#define MT_BLAS_S MT_BLAS_THREADS(nt); cblas_sgemm(MT_BLAS_ORDER(101), MT_BLAS_TRANS(ta ? 112 : 111), MT_BLAS_TRANS(tb ? 112 : 111), (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc); return;
#define MT_BLAS_D MT_BLAS_THREADS(nt); cblas_dgemm(MT_BLAS_ORDER(101), MT_BLAS_TRANS(ta ? 112 : 111), MT_BLAS_TRANS(tb ? 112 : 111), (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc); return;
#else
#define MT_BLAS_S
#define MT_BLAS_D
#endif

MT_DEFINE(float, f32, MT_BLAS_S)
MT_DEFINE(double, f64, MT_BLAS_D)
