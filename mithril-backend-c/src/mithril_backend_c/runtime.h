/* Mithril C runtime: GEMM (AVX-512 kernels where compiled for them, else BLAS or a blocked fallback),
 * im2col/col2im, pooling, branch-free selects (mt_sel_*) and a stateless RNG.
 * Every function is pure: no global or static mutable state (BLAS is told to run single-threaded: the
 * generated code parallelises with its own OpenMP threads).
 *
 * Work split: ``*_part`` functions (and the generated code's parallel regions) do part ``part`` of
 * ``nparts`` near-equal pieces, so the same kernel runs under OpenMP (part = thread number) or under
 * another thread pool (ggml's custom ops: part = ith). */
#ifndef MITHRIL_RUNTIME_H
#define MITHRIL_RUNTIME_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
/* MT_OMP("omp ..."): an OpenMP directive where OpenMP is on, nothing where it is off (so the code compiles
 * warning-free under -Wall -Wextra either way: without -fopenmp an OpenMP pragma line is an unknown pragma) */
#ifdef _OPENMP
#include <omp.h>
#define MT_OMP(directive) _Pragma(directive)
#define MT_PART(part, nparts) do { (part) = omp_get_thread_num(); (nparts) = omp_get_num_threads(); } while (0)
#else
#define MT_OMP(directive)
#define MT_PART(part, nparts) do { (part) = 0; (nparts) = 1; } while (0)
#endif

/* Return codes of the generated entry points. On MT_ERR_INDEX, a->error (when not NULL) holds
 * {check site, bad index, flat position}; <prefix>_<function>_check_site(site) describes the site.
 * MT_FAIL_INDEX runs in a generated kernel, whose parameters mt_error (the caller's error array, or
 * NULL) and mt_site0 (the number of its first check site in the entry point) it uses; it ends the
 * kernel with MT_ERR_INDEX, which the entry point returns. */
#define MT_OK 0
#define MT_ERR_ALLOC 1
#define MT_ERR_INDEX 2
#define MT_FAIL_INDEX(site, value, pos)                                                                   \
    do {                                                                                                  \
        mt_status = MT_ERR_INDEX;                                                                         \
        if (mt_error) {                                                                                   \
            mt_error[0] = (int64_t)(mt_site0 + (site));                                                   \
            mt_error[1] = (int64_t)(value);                                                               \
            mt_error[2] = (int64_t)(pos);                                                                 \
        }                                                                                                 \
        goto mt_done;                                                                                     \
    } while (0)

/* Generated kernels and constants are shared between the translation units of one library but not
 * exported from it (nor looked up through the PLT). A kernel is never inlined into its callers: in one
 * translation unit (an export's model.c) inlining hundreds of calls made the compile many times slower
 * for no speed at run time (a call costs nanoseconds, a kernel microseconds or more). */
#if defined(__GNUC__) || defined(__clang__)
#define MT_HIDDEN __attribute__((visibility("hidden")))
#define MT_KERNEL __attribute__((visibility("hidden"), noinline))
#else
#define MT_HIDDEN
#define MT_KERNEL
#endif

/* boundary k of nparts near-equal pieces of [0, n), rounded to a multiple of align (0 and n stay exact) */
static inline long mt_bound(long n, long k, long nparts, long align) {
    if (k <= 0) return 0;
    if (k >= nparts) return n;
    long b = n * k / nparts;
    if (align > 1) b = (b + align / 2) / align * align;
    return b < n ? b : n;
}
static inline void mt_part_range(long n, long part, long nparts, long align, long *lo, long *hi) {
    *lo = mt_bound(n, part, nparts, align);
    *hi = mt_bound(n, part + 1, nparts, align);
}
void mt_blas_serial(void);

#define MT_DECLARE(T, S)                                                                                   \
    void mt_gemm_##S(int ta, int tb, long M, long N, long K, T alpha, const T *A, long lda, const T *B,   \
                     long ldb, T beta, T *C, long ldc, int nt);                                           \
    void mt_im2col_##S(const T *x, T *cols, long C, long H, long W, long kh, long kw, long sh, long sw,   \
                       long ph, long pw, long dh, long dw, long OH, long OW, int nt);                     \
    void mt_im2col_range_##S(const T *x, T *cols, long C, long H, long W, long kh, long kw, long sh,      \
                             long sw, long ph, long pw, long dh, long dw, long OH, long OW, long p0,      \
                             long p1);                                                                    \
    /* Winograd F(2x2, 3x3): U[r][16][C] = G g G^T of 3x3 filters w[rows][C]; V[c][16][t - t0] = B^T d B \
     * of the 4x4 input tiles [t0, t1) (TW tiles per row, 2x2 outputs each; buf: 16 * (TW + 2) elements) */ \
    void mt_wino_filter_##S(const T *w, T *U, long rows, long C);                                        \
    void mt_wino_input_##S(const T *x, T *V, long C, long H, long W, long ph, long pw, long TW, long t0,  \
                           long t1, T *buf);                                                              \
    void mt_pool_part_##S(const T *x, T *y, long L, long H, long W, long kh, long kw, long sh, long sw,   \
                          long ph, long pw, long dh, long dw, long OH, long OW, int is_max,              \
                          int include_pad, long part, long nparts);                                      \
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

/* Block-quantized weights in ggml's layouts: rows of k values (k a multiple of MT_QK) in blocks of MT_QK,
 * each an IEEE half scale d and the values. q8_0: 32 int8 q (value d * q); q4_0: 16 bytes, value j in the
 * low nibble of byte j and value j + 16 in its high nibble (value d * (nibble - 8)). The format numbers are
 * ggml's type numbers. Activations are float32, quantized per row to q8_0 inside mt_qlinear_f32. */
#define MT_QK 32
#define MT_Q4_0 2
#define MT_Q8_0 8
typedef struct { uint16_t d; int8_t qs[MT_QK]; } mt_block_q8_0;
typedef struct { uint16_t d; uint8_t qs[MT_QK / 2]; } mt_block_q4_0;
float mt_half_to_float(uint16_t h);
uint16_t mt_float_to_half(float f); /* to nearest, ties to even */
/* activations: scale max|x| / 127, values rint(x * 127 / max|x|) */
void mt_quantize_act_q8_0(const float *x, mt_block_q8_0 *y, long k);
/* weights, rows x k floats -> rows of blocks: q8_0 scale max|x| / 127, values round(x / scale) (ties away
 * from 0); q4_0 scale -m / 8 (m: the value of largest magnitude), values min(15, trunc(x / scale + 8.5)) */
void mt_quantize_weights(int format, const float *x, void *y, long rows, long k, int nt);
/* Y[M, N] = X[M, K] @ W[N, K]^T (plus Y when accumulate) with W quantized (format); scratch: at least
 * mt_qlinear_scratch(M, K) bytes, 4-byte aligned */
size_t mt_qlinear_scratch(long M, long K);
void mt_qlinear_f32(int format, long M, long N, long K, const float *X, const void *W, float *Y, int accumulate,
                    void *scratch, int nt);
/* Convolution of one image x [C, H, Wd] with quantized weights W [O, C * kh * kw] (rows of whole blocks)
 * for output pixels [p0, p1) and channels [o0, o1): y[o * ldy + p] = the sum (no bias); each pixel's patch
 * (im2col, in the weight's order) is quantized to q8_0 as activations are. scratch: mt_qconv_scratch bytes. */
size_t mt_qconv_scratch(long K, long pixels);
void mt_qconv_block_f32(int format, const float *x, const void *W, float *y, long ldy, long C, long H, long Wd,
                        long kh, long kw, long sh, long sw, long ph, long pw, long dh, long dw, long OW, long p0,
                        long p1, long o0, long o1, void *scratch);
/* out[i, :] = row index[i] of W [rows, dim] (quantized), as floats; indices checked by the caller */
void mt_qrows_f32(int format, const void *W, const int64_t *index, long n, long dim, float *out);

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
/* a // b for floats as NumPy defines it: the quotient q of a = q * b + r where the remainder r (fmod's,
 * moved to b's side when the signs differ) has b's sign, rounded to the nearest integer (so inf // x and
 * x // inf follow fmod: NaN, or a signed zero); b == 0 gives a / b (a signed infinity, or NaN) */
#define MT_FLOORDIV_FLOAT(T, S, FMOD, FLOOR, COPYSIGN)                                                     \
    static inline T mt_floordiv_##S(T a, T b) {                                                           \
        if (b == 0) return a / b;                                                                         \
        T r = FMOD(a, b), q = (a - r) / b;                                                                \
        if (r != 0 && ((b < 0) != (r < 0))) q -= 1;                                                       \
        if (q == 0) return COPYSIGN((T)0, a / b);                                                         \
        T f = FLOOR(q);                                                                                   \
        return q - f > (T)0.5 ? f + 1 : f;                                                                \
    }
MT_FLOORDIV_FLOAT(float, f32, fmodf, floorf, copysignf)
MT_FLOORDIV_FLOAT(double, f64, fmod, floor, copysign)

/* c ? a : b without a branch (the bits of a or of b, both evaluated): the generated code is compiled with
 * -fno-tree-loop-if-convert (toolchain.py: GCC 12.2 miscompiled if-converted selects), which leaves every
 * loop holding a '?:' scalar; a select written as bit operations needs no if-conversion, so such loops
 * (ReLU in a convolution's epilogue, where's gradients) are vectorised again, with no masked load */
#define MT_SEL_FLOAT(T, S, BITS)                                                                           \
    static inline T mt_sel_##S(int c, T a, T b) {                                                         \
        BITS x, y, m = (BITS)0 - (BITS)(c != 0);                                                          \
        memcpy(&x, &a, sizeof x);                                                                         \
        memcpy(&y, &b, sizeof y);                                                                         \
        x = (x & m) | (y & ~m);                                                                           \
        memcpy(&a, &x, sizeof a);                                                                         \
        return a;                                                                                         \
    }
MT_SEL_FLOAT(float, f32, uint32_t)
MT_SEL_FLOAT(double, f64, uint64_t)
static inline int64_t mt_sel_i64(int c, int64_t a, int64_t b) {
    uint64_t m = (uint64_t)0 - (uint64_t)(c != 0);
    return (int64_t)(((uint64_t)a & m) | ((uint64_t)b & ~m));
}

/* 2^n as a float, for n in -126..127 (a normal number: its exponent bits) */
static inline float mt_pow2i_f32(int32_t n) {
    uint32_t bits = (uint32_t)(n + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* e^x in float without a branch or a call, so that loops over it vectorise (glibc's expf is a call per
 * element): e^x = 2^n e^r with n = round(x / ln 2) and |r| <= ln 2 / 2, e^r by its Taylor series to r^7
 * (truncation below 6e-9), r by a two-part ln 2. Within 0.86 ulp of e^x over every float (checked against
 * double exp); NaN stays NaN, -inf and x < -103.97 give 0 (gradual underflow kept: 2^n is applied in two
 * halves), x > 88.72 gives inf. */
static inline float mt_exp_f32(float x) {
    x = mt_sel_f32(x > 89.0f, 89.0f, x);
    x = mt_sel_f32(x < -110.0f, -110.0f, x);
    float k = x * 1.44269504088896341f + 12582912.0f; /* + 1.5 * 2^23: round to an integer in the low bits */
    int32_t bits;
    memcpy(&bits, &k, sizeof bits);
    int32_t n = bits - 0x4B400000, half = n / 2;
    k -= 12582912.0f;
    float r = x - k * 0.693145751953125f - k * 1.428606765330187e-06f;
    float p = 1.0f / 5040 + r * (1.0f / 40320);
    p = 1.0f / 720 + r * p;
    p = 1.0f / 120 + r * p;
    p = 1.0f / 24 + r * p;
    p = 1.0f / 6 + r * p;
    p = 0.5f + r * p;
    p = 1.0f + r * p;
    p = 1.0f + r * p;
    return p * mt_pow2i_f32(half) * mt_pow2i_f32(n - half);
}

/* tanh in float, vectorisable as mt_exp_f32: |x| < 0.625 by x + x^3 q(x^2) (q fitted to tanh, relative
 * error below 5e-9 there), above by 1 - 2 / (e^2|x| + 1); the sign copied back. Within 1.4 ulp of tanh over
 * every float; NaN stays NaN, -0 stays -0, +-inf give +-1. */
static inline float mt_tanh_f32(float x) {
    float a = fabsf(x), a2 = a * a;
    float q = -0.005704953617746559f;
    q = 0.02063905508782732f + a2 * q;
    q = -0.053739704277022876f + a2 * q;
    q = 0.13331442051966527f + a2 * q;
    q = -0.3333328193560197f + a2 * q;
    float small = a + a * a2 * q, large = 1.0f - 2.0f / (mt_exp_f32(2.0f * a) + 1.0f);
    return copysignf(mt_sel_f32(a < 0.625f, small, large), x);
}

/* softmax of a contiguous float row in place: the max (NaN anywhere makes the row NaN), the exponentials by
 * mt_exp_f32 (one per element, vectorised; masked slots underflow to 0 without glibc's slow path), their sum
 * in double */
void mt_softmax_row_f32(float *v, long n);

/* 1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) below (never exp of a large positive): one exp, of
 * -|x|, which is the one either form takes, and a select (the same bits as computing the chosen form) */
static inline float mt_sigmoid_f32(float x) {
    float t = mt_exp_f32(-fabsf(x));
    return mt_sel_f32(x >= 0, 1 / (1 + t), t / (1 + t));
}
static inline double mt_sigmoid_f64(double x) {
    double t = exp(-fabs(x));
    return mt_sel_f64(x >= 0, 1 / (1 + t), t / (1 + t));
}

static inline int64_t mt_floordiv_i64(int64_t a, int64_t b) {
    if (b == 0) return 0;
    if (b == -1) return (int64_t)(0 - (uint64_t)a); /* INT64_MIN / -1 traps (SIGFPE); NumPy wraps */
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
#endif
