/* Mithril C runtime: GEMM (BLAS or a blocked fallback), im2col/col2im, pooling and a stateless RNG.
 * Every function is pure: no global or static mutable state. */
#ifndef MITHRIL_RUNTIME_H
#define MITHRIL_RUNTIME_H
#include <stddef.h>
#include <stdint.h>

#define MT_DECLARE(T, S)                                                                                   \
    void mt_gemm_##S(int ta, int tb, long M, long N, long K, T alpha, const T *A, long lda, const T *B,   \
                     long ldb, T beta, T *C, long ldc, int nt);                                           \
    void mt_im2col_##S(const T *x, T *cols, long C, long H, long W, long kh, long kw, long sh, long sw,   \
                       long ph, long pw, long dh, long dw, long OH, long OW, int nt);                     \
    void mt_col2im_##S(const T *cols, T *x, long C, long H, long W, long kh, long kw, long sh, long sw,   \
                       long ph, long pw, long dh, long dw, long OH, long OW, int nt);                     \
    void mt_pool_##S(const T *x, T *y, long L, long H, long W, long kh, long kw, long sh, long sw,        \
                     long ph, long pw, long dh, long dw, long OH, long OW, int is_max, int include_pad,  \
                     int nt);                                                                             \
    void mt_pool_grad_##S(const T *g, const T *x, T *dx, long L, long H, long W, long kh, long kw,        \
                          long sh, long sw, long ph, long pw, long dh, long dw, long OH, long OW,         \
                          int is_max, int include_pad, int nt);

MT_DECLARE(float, f32)
MT_DECLARE(double, f64)

/* counter-based random numbers: the same (seed, stream, i) always gives the same draw */
static inline uint64_t mt_mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static inline double mt_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
    return (double)(mt_mix64(seed ^ mt_mix64(stream * 0x100000001B3ULL + i)) >> 11) * 0x1.0p-53;
}
static inline int64_t mt_floordiv_i64(int64_t a, int64_t b) {
    if (b == 0) return 0;
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
#endif
