#!/bin/sh
# Builds the exported program (@PROGRAM@) with a C compiler and -lm only: `sh build.sh` or `make`.
# CC (default cc) and CFLAGS (default -O3 -fno-math-errno) are honoured, and ARCH: the instruction set
# flags, by default -march=native (or -mcpu=native) when the compiler takes it and the program it builds
# runs here, i.e. when not cross-compiling (a cross compiler's probe fails: no ARCH). ARCH= leaves it out
# (a binary for any CPU of the build machine's kind), ARCH=-march=armv8.2-a names a target. Built for the
# generic x86-64 (SSE2) instead of this CPU, the decode step of GPT-2 small takes 1.3-1.7x as long.
# OpenMP (--threads) and OpenBLAS (matrix products) are used when the compiler finds them, never
# required: MITHRIL_OPENMP=0 / MITHRIL_BLAS=0 leave them out. BLAS="-DMT_USE_BLAS -DMT_BLAS_OPENBLAS ...
# -lopenblas" names another BLAS (defines, include and link flags: e.g. the line of a C-backend export's
# BUILD.scipy-openblas, without the sources).
set -e
cd "$(dirname "$0")"
CC=${CC:-cc}
CFLAGS=${CFLAGS:--O3 -fno-math-errno}
PROGRAM=@PROGRAM@
MODEL_SOURCES="@MODEL_SOURCES@"

probe() { # probe 'C source' FLAGS...: whether it compiles, links and runs
    src=.probe-$$.c
    printf '%s\n' "$1" >"$src"
    shift
    if $CC "$src" -o ".probe-$$" "$@" >/dev/null 2>&1 && "./.probe-$$"; then ok=0; else ok=1; fi
    rm -f "$src" ".probe-$$"
    return $ok
}

if [ -z "${ARCH+set}" ]; then
    ARCH=""
    for flag in -march=native -mcpu=native; do
        if probe 'int main(void) { return 0; }' -Werror $flag; then
            ARCH=$flag
            break
        fi
    done
fi
CFLAGS="$CFLAGS${ARCH:+ $ARCH}"
OPENMP=""
if [ "${MITHRIL_OPENMP:-1}" != 0 ] && probe '#include <omp.h>
int main(void) { return omp_get_max_threads() < 1; }' -fopenmp; then
    OPENMP=-fopenmp
fi
BLAS_DEFINES=""
BLAS_LIBS=""
if [ -n "${BLAS:-}" ]; then
    BLAS_DEFINES="$BLAS"
    BLAS_LIBS="$BLAS"
elif [ "${MITHRIL_BLAS:-1}" != 0 ] && probe '#include <cblas.h>
int main(void) {
    float a = 2, b = 3, c = 0;
    openblas_set_num_threads(1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
    return c != 6;
}' -lopenblas; then
    BLAS_DEFINES="-DMT_USE_BLAS -DMT_BLAS_OPENBLAS"
    BLAS_LIBS=-lopenblas
fi
# Each function in its own section and the linker dropping those nothing calls: the runtime's kernels
# this program does not use (other dtypes, pooling, convolutions) stay out of the binary.
SECTIONS=""
GC=""
if probe 'int unused(void) { return 1; }
int main(void) { return 0; }' -ffunction-sections -fdata-sections -Wl,--gc-sections; then
    SECTIONS="-ffunction-sections -fdata-sections"
    GC="-Wl,--gc-sections"
fi

# Every source, the generated model code included, compiles warning-free with -Wall -Wextra.
objects=""
for src in $MODEL_SOURCES; do
    $CC $CFLAGS $SECTIONS $OPENMP $BLAS_DEFINES -Wall -Wextra -c "$src" -o "${src%.c}.o"
    objects="$objects ${src%.c}.o"
done
$CC $CFLAGS $SECTIONS $OPENMP -Os -Wall -Wextra -c main.c -o main.o # the command line and file checks: size, not speed
$CC $CFLAGS $OPENMP $GC main.o $objects -o "$PROGRAM" $BLAS_LIBS -lm
echo "built $PROGRAM (CFLAGS: $CFLAGS; OpenMP: ${OPENMP:-no}; BLAS: ${BLAS_LIBS:-no, the built-in GEMM})"
