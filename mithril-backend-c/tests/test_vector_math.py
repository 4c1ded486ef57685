"""runtime.h's call-free float functions (``mt_exp_f32``, ``mt_tanh_f32``, ``mt_softmax_row_f32``), which the
emitters use for float ``exp``, ``tanh``, GELU, sigmoid and softmax so that their loops vectorise: their
error against double precision over floats from every binade, their special values, and that the loops
holding them are vectorised on one thread (an OpenMP ``if`` that named no construct once kept ``parallel for
simd`` loops scalar there)."""

from __future__ import annotations

import shutil
from typing import Any

import mithril as ml
import numpy as np
import pytest
from mithril.models import Gelu, IOKey, Model, Tanh

from mithril_backend_c import kernels

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="needs a C compiler")

_FUNCTIONS = """
void t_exp(const float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = mt_exp_f32(x[i]); }
void t_tanh(const float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = mt_tanh_f32(x[i]); }
void t_softmax(float *v, long rows, long n) { for (long r = 0; r < rows; r++) mt_softmax_row_f32(v + r * n, n); }
"""


@pytest.fixture(scope="module")
def native() -> Any:
    library = kernels.build_library("\n".join([*kernels.INCLUDES, _FUNCTIONS]))
    cdef = "void t_exp(const float *, float *, long); void t_tanh(const float *, float *, long);" \
           "void t_softmax(float *, long, long);"  # fmt: skip
    return kernels.load_library(library, cdef)


def _apply(native: Any, name: str, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    y = np.empty_like(x)
    cast = native.ffi.cast
    getattr(native.lib, name)(cast("float *", x.ctypes.data), cast("float *", y.ctypes.data), x.size)
    return y


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of the last place of ``want`` rounded to float32 (the smallest subnormal below)."""
    rounded = np.abs(want.astype(np.float32))
    ulp = np.spacing(rounded).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / ulp


def _floats(lo: float, hi: float, count: int = 400_000) -> np.ndarray:
    """Floats spread over every binade of [lo, hi] (both signs where the range has them), and the ends."""
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = bits[np.isfinite(bits) & (bits >= lo) & (bits <= hi)]
    return np.concatenate([x, np.float32([lo, hi, 0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 0.625, -0.625])])


def test_exp_is_within_one_ulp_everywhere(native: Any) -> None:
    x = _floats(-103.0, 88.7)
    assert _ulps(_apply(native, "t_exp", x), np.exp(x.astype(np.float64))).max() <= 1.0
    special = np.float32([np.nan, -np.inf, np.inf, 89.0, 1e30, -104.5, -1e30, -87.5])
    got = _apply(native, "t_exp", special)
    assert np.isnan(got[0]) and (got[[1, 5, 6]] == 0).all() and np.isinf(got[[2, 3, 4]]).all()
    assert got[7] == np.float32(np.exp(-87.5))  # a subnormal result, not flushed to 0


def test_tanh_is_within_two_ulp_everywhere(native: Any) -> None:
    x = _floats(-20.0, 20.0)
    assert _ulps(_apply(native, "t_tanh", x), np.tanh(x.astype(np.float64))).max() <= 2.0
    got = _apply(native, "t_tanh", np.float32([np.nan, np.inf, -np.inf, -0.0, 1e-30]))
    assert np.isnan(got[0]) and got[1] == 1 and got[2] == -1 and got[3] == 0 and np.signbit(got[3])
    assert got[4] == np.float32(1e-30)


def test_softmax_rows_match_double_precision(native: Any) -> None:
    rng = np.random.default_rng(1)
    rows = (rng.standard_normal((6, 37)) * 10).astype(np.float32)
    rows[1, 5:] = -65504.0  # masked slots (the decode steps' additive mask)
    rows[2, :] = -np.inf  # every slot masked: NaN, as NumPy's softmax
    rows[3, 7] = np.nan
    rows[4, 9] = np.inf
    v = rows.copy()
    native.lib.t_softmax(native.ffi.cast("float *", v.ctypes.data), 6, 37)
    x = rows.astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(-1, keepdims=True))
        want = e / e.sum(-1, keepdims=True)
    # x - max is rounded to float (as float32 softmaxes do): relative error up to |x - max| * 2^-24 on the
    # small probabilities, a few ulp on the large ones
    np.testing.assert_allclose(v, want, rtol=1e-6, atol=1e-10)
    assert (v[1, 5:] == 0).all() and np.isnan(v[2]).all() and np.isnan(v[3]).all()


@pytest.mark.parametrize("block", [Tanh, lambda: Gelu(approximate=True)])
def test_one_thread_elementwise_loops_are_vectorised_and_agree(block: Any) -> None:
    model = Model()
    model |= block()(input="x", output=IOKey("y"))
    pm = ml.compile(model, ml.CBackend(threads=1), shapes={"x": [64, 1024]}, data_keys={"x"}, inference=True)
    assert "if(parallel: nt > 1)" in pm.source and "if(nt > 1)" not in pm.source
    x = np.random.default_rng(2).standard_normal((64, 1024)).astype(np.float32) * 4
    pytest.importorskip("mithril_backend_numpy", reason="the NumPy backend computes the reference")
    want = ml.compile(model, ml.NumpyBackend(), shapes={"x": [64, 1024]}, data_keys={"x"}, inference=True)
    np.testing.assert_allclose(pm.evaluate({}, {"x": x})["y"], want.evaluate({}, {"x": x})["y"], rtol=3e-7, atol=3e-7)
