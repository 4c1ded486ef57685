"""Block-quantized weights (``q8_0``, ``q4_0``): the NumPy quantizer against ggml's own functions (through
ggml-python, when installed), the C runtime's quantizer and products against them, the generated C of a
quantized model against NumPy, and the decode-step details of the C code (``where`` by rows, attention's
exponentials computed once, the blocked fallback GEMM)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError
from mithril.models import Embedding, IOKey, Linear, Model, Relu, ScaledDotProduct, Where

from mithril_backend_c import kernels, toolchain
from mithril_backend_c.emitters.linalg import quantized_scratch

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="needs a C compiler")

FORMATS = ("q8_0", "q4_0")
RUNTIME = Path(kernels.__file__).parent


def _data(seed: int = 0) -> list[np.ndarray]:
    """Gaussian rows, rows of exact ties (x.5 steps), zero blocks and one large block."""
    rng = np.random.default_rng(seed)
    ties = ((rng.integers(-127, 128, (8, 256)) + 0.5) / 8).astype(np.float32)
    ties[:, ::32] = 127 / 8
    zeros = np.zeros((2, 64), np.float32)
    wide = (rng.standard_normal((4, 96)) * 1e4).astype(np.float32)
    return [rng.standard_normal((16, 768)).astype(np.float32), ties, zeros, wide]


def _ggml() -> Any:
    ggml = pytest.importorskip("ggml")
    ggml.ggml_cpu_init()  # ggml's fp16 tables
    return ggml


def _ggml_type(ggml: Any, fmt: str) -> int:
    return ggml.GGML_TYPE_Q8_0 if fmt == "q8_0" else ggml.GGML_TYPE_Q4_0


@pytest.mark.parametrize("fmt", FORMATS)
def test_numpy_quantizer_gives_ggml_bytes_and_ggml_dequantizes_them_alike(fmt: str) -> None:
    ggml = _ggml()
    kind = _ggml_type(ggml, fmt)
    traits = ggml.ggml_get_type_traits(kind).contents
    for x in _data():
        ours = kernels.quantize(x, fmt)
        assert ours.shape == (x.shape[0], kernels.FORMATS[fmt].row_bytes(x.shape[1]))
        theirs = np.zeros(ours.size, np.uint8)
        src = x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        ggml.ggml_quantize_chunk(kind, src, theirs.ctypes.data, 0, x.shape[0], x.shape[1], None)
        np.testing.assert_array_equal(ours.reshape(-1), theirs)
        values = np.zeros(x.size, np.float32)
        traits.to_float(theirs.ctypes.data, values.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), x.size)
        np.testing.assert_array_equal(kernels.dequantize(ours, fmt, x.shape), values.reshape(x.shape))


def test_format_layout_written_out() -> None:
    """The layouts as the format describes them, without ggml: q8_0 = half scale + 32 int8; q4_0 = half
    scale + 16 bytes, value j in the low nibble of byte j and value j + 16 in the high nibble, offset 8."""
    x = np.arange(-16, 16, dtype=np.float32).reshape(1, 32)
    q8 = kernels.quantize(x, "q8_0")[0]
    scale = np.float32(16) / np.float32(127)
    assert q8[:2].view("<f2")[0] == np.float16(scale)
    np.testing.assert_array_equal(q8[2:].view(np.int8), np.trunc(x[0] / scale + np.sign(x[0]) * 0.5).astype(np.int8))
    q4 = kernels.quantize(x, "q4_0")[0]
    assert q4[:2].view("<f2")[0] == np.float16(2.0)  # largest magnitude -16 -> d = -16 / -8
    nibbles = np.concatenate([q4[2:] & 15, q4[2:] >> 4])
    np.testing.assert_array_equal(nibbles.astype(np.int32) - 8, np.clip(np.trunc(x[0] / 2 + 8.5), 0, 15) - 8)
    assert kernels.quantized_nbytes((3, 64), "q8_0") == 3 * 2 * 34 and kernels.quantized_nbytes((3, 64), "q4_0") == 108
    with pytest.raises(ArgumentError, match="whole blocks"):
        kernels.quantize(np.ones((2, 33), np.float32), "q8_0")
    with pytest.raises(ArgumentError, match="unknown quantization"):
        kernels.quantize(np.ones((2, 32), np.float32), "q5_0")


@pytest.mark.parametrize("fmt", FORMATS)
def test_c_quantizer_gives_the_numpy_bytes(fmt: str) -> None:
    odd = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    odd[0, 3], odd[1, 40], odd[2, 0], odd[3, :32] = np.nan, np.inf, -np.inf, np.nan  # ignored for the scale, then 0
    for x in [*_data(1), odd]:
        out = np.zeros((x.shape[0], kernels.FORMATS[fmt].row_bytes(x.shape[1])), np.uint8)
        kernels.quantizer()(fmt, x, out.ctypes.data, 2)
        np.testing.assert_array_equal(out, kernels.quantize(x, fmt))


_QLINEAR = """
void t_qlinear(int format, long M, long N, long K, const float *X, const void *W, float *Y, void *s) {
    mt_qlinear_f32(format, M, N, K, X, W, Y, 0, s, 1);
}
void t_qlinear_nt(int format, long M, long N, long K, const float *X, const void *W, float *Y, int acc, void *s,
                  int nt) {
    mt_qlinear_f32(format, M, N, K, X, W, Y, acc, s, nt);
}
size_t t_scratch(long M, long K) { return mt_qlinear_scratch(M, K); }
"""


def _qlinear() -> Any:
    library = kernels.build_library("\n".join([*kernels.INCLUDES, _QLINEAR]))
    cdef = "void t_qlinear(int, long, long, long, const float *, const void *, float *, void *);" \
           "void t_qlinear_nt(int, long, long, long, const float *, const void *, float *, int, void *, int);" \
           "size_t t_scratch(long, long);"  # fmt: skip
    return kernels.load_library(library, cdef)


def test_generated_scratch_matches_the_runtime() -> None:
    native = _qlinear()
    for rows in (1, 2, 3, 7, 8, 9, 32, 33, 128):
        for k in (32, 768, 3072):
            assert native.lib.t_scratch(rows, k) == quantized_scratch(rows, k), (rows, k)


def _assert_ggmls(got: np.ndarray, want: np.ndarray, rows: int, where: str = "") -> None:
    """One row (a decode step) is ggml's bit for bit; several rows (the strips of 16 weight rows) sum each
    block's exact integer product in another float order: within a few ulp of the row's largest output."""
    if rows == 1:
        np.testing.assert_array_equal(got, want, err_msg=where)
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * float(np.abs(want).max()), err_msg=where)


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_products_are_ggmls(fmt: str) -> None:
    """mt_qlinear_f32 (one row, and several rows at once) against ggml's quantize-and-vec_dot."""
    ggml = _ggml()
    cpu = ggml.ggml_get_type_traits_cpu(_ggml_type(ggml, fmt)).contents
    activations = ggml.ggml_get_type_traits_cpu(cpu.vec_dot_type).contents  # q8_0 for both formats
    native = _qlinear()
    rng = np.random.default_rng(2)
    n, k = 40, 768
    w = kernels.quantize((rng.standard_normal((n, k)) * 0.05).astype(np.float32), fmt)
    for rows in (1, 5, 32):
        x = (rng.standard_normal((rows, k)) * 3).astype(np.float32)
        y = np.zeros((rows, n), np.float32)
        scratch = np.zeros(native.lib.t_scratch(rows, k) + 64, np.uint8)
        ffi = native.ffi
        native.lib.t_qlinear(kernels.FORMATS[fmt].code, rows, n, k, ffi.cast("float *", x.ctypes.data),
                             ffi.cast("void *", w.ctypes.data), ffi.cast("float *", y.ctypes.data),
                             ffi.cast("void *", scratch.ctypes.data))  # fmt: skip
        want = np.zeros((rows, n), np.float32)
        for m in range(rows):
            xq = np.zeros(k // 32 * 34, np.uint8)
            activations.from_float(x[m].ctypes.data_as(ctypes.POINTER(ctypes.c_float)), xq.ctypes.data, k)
            for j in range(n):
                s = ctypes.c_float()
                cpu.vec_dot(k, ctypes.byref(s), 0, w[j].ctypes.data, 0, xq.ctypes.data, 0, 1)
                want[m, j] = s.value
        _assert_ggmls(y, want, rows)


def _ggml_products(ggml: Any, fmt: str, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w.T as ggml computes it: each row of x quantized to q8_0, then vec_dot with each weight row."""
    cpu = ggml.ggml_get_type_traits_cpu(_ggml_type(ggml, fmt)).contents
    activations = ggml.ggml_get_type_traits_cpu(cpu.vec_dot_type).contents  # q8_0 for both formats
    rows, k = x.shape
    want = np.zeros((rows, w.shape[0]), np.float32)
    for m in range(rows):
        xq = np.zeros(k // 32 * 34, np.uint8)
        activations.from_float(x[m].ctypes.data_as(ctypes.POINTER(ctypes.c_float)), xq.ctypes.data, k)
        for j in range(w.shape[0]):
            s = ctypes.c_float()
            cpu.vec_dot(k, ctypes.byref(s), 0, w[j].ctypes.data, 0, xq.ctypes.data, 0, 1)
            want[m, j] = s.value
    return want


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_products_of_every_tile_shape_are_ggmls(fmt: str) -> None:
    """The several-row kernels at their edges: rows 1, 2, 3, 5, 8, 9 and 33 (tiles of 8 rows and what is
    left), outputs not a multiple of 16 (the rows left over), one block per row, 1 and 2 threads, with and
    without accumulating into Y; nothing written past the scratch space or Y."""
    ggml = _ggml()
    native = _qlinear()
    ffi = native.ffi
    rng = np.random.default_rng(5)
    for rows, n, k in ((1, 13, 64), (2, 16, 32), (3, 13, 96), (5, 61, 768), (8, 64, 768), (9, 48, 64), (33, 61, 768)):
        w = kernels.quantize((rng.standard_normal((n, k)) * 0.05).astype(np.float32), fmt)
        x = (rng.standard_normal((rows, k)) * 3).astype(np.float32)
        x[0, :32] = (rng.integers(-127, 127, 32) + 0.5) / 8  # exact ties when quantized (scale 1/8) ...
        x[0, 0] = 127 / 8
        x[-1, k - 32 :] = 0  # ... and a zero block
        want = _ggml_products(ggml, fmt, x, w)
        for threads, accumulate in ((1, 0), (2, 0), (2, 1)):
            start = (rng.standard_normal((rows, n)) * accumulate).astype(np.float32)
            y = np.concatenate([start.reshape(-1), np.full(16, 7.0, np.float32)])  # a guard after Y
            size = native.lib.t_scratch(rows, k)
            scratch = np.full(size + 4 + 256, 0xA5, np.uint8)  # 4 bytes in (4-byte aligned), a guard after
            native.lib.t_qlinear_nt(kernels.FORMATS[fmt].code, rows, n, k, ffi.cast("float *", x.ctypes.data),
                                    ffi.cast("void *", w.ctypes.data), ffi.cast("float *", y.ctypes.data),
                                    accumulate, ffi.cast("void *", scratch.ctypes.data + 4), threads)  # fmt: skip
            expected = start + want if accumulate else want
            _assert_ggmls(y[: rows * n].reshape(rows, n), expected, rows, f"{rows, n, k, threads}")
            assert (y[rows * n :] == 7.0).all() and (scratch[4 + size :] == 0xA5).all() and (scratch[:4] == 0xA5).all()


def _activations(x: np.ndarray) -> np.ndarray:
    """``x`` quantized per row to q8_0 as activations are (scale max|x| / 127, rint) and back."""
    b = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(b).max(1)
    with np.errstate(divide="ignore"):
        inverse = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    scale = (amax / np.float32(127)).astype(np.float16).astype(np.float32)
    return (np.rint(b * inverse[:, None]) * scale[:, None]).reshape(x.shape)


def _quantized_model() -> tuple[Any, Model]:
    model = Model()
    model |= Embedding(100, 64)(input=IOKey("input", type="int"), output="e")
    model |= Linear(96)(input="e", output="h")
    model += Relu()
    model += Linear(32, use_bias=False)(output=IOKey("output"))
    pm = ml.compile(model, ml.CBackend(threads=1), shapes={"input": [3, 5]}, data_keys={"input"}, inference=True)
    return pm, model


@pytest.mark.parametrize("fmt", FORMATS)
def test_generated_c_with_quantized_weights_matches_numpy(fmt: str) -> None:
    pm, _ = _quantized_model()
    code, functions = kernels.compiled_source(pm, fmt)
    (fn,) = functions
    assert {f.key for f in fn.inputs if f.quant == fmt} == {k for k in pm.param_keys if not k.startswith("bias")}
    assert f"{fmt}[100, 64]" in code.text()  # the struct comment
    call = kernels.load_functions(toolchain.build_units(code.units(), "test"), functions, pm.backend)["evaluate"]
    params = pm.randomize_params(seed=0)
    quantized = {f.key: kernels.quantize(params[f.key], fmt) if f.quant else params[f.key] for f in fn.inputs
                 if f.role == "param"}  # fmt: skip
    idx = np.arange(15).reshape(3, 5) * 7 % 100
    got = call(quantized, {"input": idx})["output"]
    w = {pm.input_paths[k]: kernels.dequantize(v, fmt, params[k].shape) if v.dtype == np.uint8 else v
         for k, v in quantized.items()}  # fmt: skip
    hidden = _activations(w["embedding_0.weight"][idx].reshape(-1, 64)) @ w["linear_0.weight"].T.astype(np.float64)
    hidden = np.maximum(hidden + w["linear_0.bias"], 0).astype(np.float32)
    want = _activations(hidden) @ w["linear_1.weight"].T.astype(np.float64)
    np.testing.assert_allclose(got.reshape(-1, 32), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_which_parameters_are_quantized_and_refusals() -> None:
    model = Model()
    model |= Linear(32)(input="input", output="a")  # weight [32, 64]: quantized
    model |= Linear(8)(input="a", output=IOKey("output"))  # weight [8, 32]: quantized
    model |= Linear(4)(input="other", output=IOKey("odd"))  # rows of 20 values: stays float
    shapes = {"input": [2, 64], "other": [2, 20]}
    pm = ml.compile(model, ml.CBackend(threads=1), shapes=shapes, data_keys=set(shapes), inference=True)
    (fn,) = kernels.compiled_source(pm, "q4_0")[1]
    assert sorted(pm.input_paths[f.key] for f in fn.inputs if f.quant) == ["linear_0.weight", "linear_1.weight"]
    trained = ml.compile(model, ml.CBackend(threads=1), shapes=shapes, data_keys=set(shapes))
    with pytest.raises(ArgumentError, match="inference"):
        kernels.compiled_source(trained, "q8_0")
    with pytest.raises(ArgumentError, match="unknown quantization"):
        kernels.compiled_source(pm, "q3")


def test_where_over_a_cache_copies_rows_and_gives_the_same_values() -> None:
    model = Model()
    model |= Where()(cond="hit", input1="new", input2="past", output=IOKey("output"))
    shapes = {"hit": [16, 1], "new": [1, 2, 1, 32], "past": [1, 2, 16, 32]}
    pm = ml.compile(model, ml.CBackend(threads=1), shapes=shapes, data_keys=set(shapes), inference=True)
    assert "memcpy(" in pm.source and "? mt_in1 : mt_in2" not in pm.source  # rows copied, no elementwise select
    rng = np.random.default_rng(0)
    hit = np.zeros((16, 1), bool)
    hit[5] = True
    data = {"hit": hit, "new": rng.standard_normal(shapes["new"]).astype(np.float32),
            "past": rng.standard_normal(shapes["past"]).astype(np.float32)}  # fmt: skip
    np.testing.assert_array_equal(pm.evaluate({}, data)["output"], np.where(hit, data["new"], data["past"]))


def test_attention_computes_each_exponential_once() -> None:
    model = Model()
    model |= ScaledDotProduct(is_causal=True)(query="q", key="k", value="v", output=IOKey("output"))
    shapes = {name: [1, 2, 8, 16] for name in ("q", "k", "v")}
    pm = ml.compile(model, ml.CBackend(threads=1), shapes=shapes, data_keys=set(shapes), inference=True)
    assert pm.source.count("mt_softmax_row_f32(v, 8);") == 1 and "exp((double)" not in pm.source
    rng = np.random.default_rng(0)
    data = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    scores = data["q"] @ data["k"].swapaxes(-1, -2) / 4 + np.triu(np.full((8, 8), -np.inf), 1)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    want = (probs / probs.sum(-1, keepdims=True)) @ data["v"]
    np.testing.assert_allclose(pm.evaluate({}, data)["output"], want, rtol=1e-5, atol=1e-6)


_GEMM_TEST = r"""
#include <stdio.h>
#include <stdlib.h>
#include "runtime.h"
int main(void) {
    long shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {13, 17, 130}, {100, 300, 257}, {6, 16, 128}, {97, 257, 129}};
    for (int s = 0; s < 6; s++) for (int t = 0; t < 4; t++) {
        long M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        int ta = t & 1, tb = t >> 1;
        float *A = malloc(4 * M * K), *B = malloc(4 * K * N), *C = malloc(4 * M * N);
        double *A2 = malloc(8 * M * K), *B2 = malloc(8 * K * N), *C2 = malloc(8 * M * N);
        for (long i = 0; i < M * K; i++) A2[i] = A[i] = (float)((i * 7919 % 2003) / 1001.0 - 1);
        for (long i = 0; i < K * N; i++) B2[i] = B[i] = (float)((i * 104729 % 3001) / 1500.0 - 1);
        for (long i = 0; i < M * N; i++) C2[i] = C[i] = (float)((i * 31 % 17) / 8.0 - 1);
        mt_gemm_f32(ta, tb, M, N, K, 0.5f, A, ta ? M : K, B, tb ? K : N, 0.25f, C, N, 2);
        mt_gemm_f64(ta, tb, M, N, K, 0.5, A2, ta ? M : K, B2, tb ? K : N, 0.25, C2, N, 2);
        for (long i = 0; i < M * N; i++) printf("%.9g %.17g\n", C[i], C2[i]);
    }
    return 0;
}
"""


def test_blocked_fallback_gemm_without_blas(tmp_path: Path) -> None:
    """The fallback GEMM (exported programs without a BLAS): every transpose, edge tiles, both types."""
    (tmp_path / "t.c").write_text(_GEMM_TEST)
    for name in ("runtime.c", "runtime.h"):
        (tmp_path / name).write_text((RUNTIME / name).read_text())
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-O2", "-march=native", "t.c", "runtime.c", "-o", "t", "-lm"], cwd=tmp_path, check=True)
    out = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, check=True).stdout
    got = np.loadtxt(out.splitlines())
    want = []
    for m, n, k in ((1, 1, 1), (7, 5, 3), (13, 17, 130), (100, 300, 257), (6, 16, 128), (97, 257, 129)):
        a = np.array([(i * 7919 % 2003) / 1001.0 - 1 for i in range(m * k)], np.float32).astype(np.float64)
        b = np.array([(i * 104729 % 3001) / 1500.0 - 1 for i in range(k * n)], np.float32).astype(np.float64)
        c = np.array([(i * 31 % 17) / 8.0 - 1 for i in range(m * n)])
        for t in range(4):
            left = a.reshape(k, m).T if t & 1 else a.reshape(m, k)
            right = b.reshape(n, k).T if t >> 1 else b.reshape(k, n)
            want.append((0.5 * left @ right + 0.25 * c.reshape(m, n)).reshape(-1))
    want = np.concatenate(want)
    np.testing.assert_allclose(got[:, 0], want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[:, 1], want, rtol=1e-12, atol=1e-11)
