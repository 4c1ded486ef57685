"""The core conformance suite on MLX: every case forward in float32/float16/bfloat16, gradients (from
``mx.vjp``) in float32 against float64 finite differences, and the random ops — once compiled with
``mx.compile`` (``ml.compile``'s default) and once eager."""

from __future__ import annotations

import mithril as ml
from mithril.testing import BackendConformanceTests


class TestMlxConformance(BackendConformanceTests):
    backend_factory = staticmethod(lambda dtype: ml.MlxBackend(dtype=dtype))
    dtypes = (ml.float32, ml.float16, ml.bfloat16)
    grad_dtypes = (ml.float32,)
    unsupported = frozenset()
    jit = True


class TestMlxConformanceEager(TestMlxConformance):
    jit = False
