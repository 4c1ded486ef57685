"""The core conformance suite on MLX: every case forward in float32/float16/bfloat16, gradients (from
``mx.vjp``) in float32 against float64 finite differences, and the random ops — once compiled with
``mx.compile`` (``ml.compile``'s default) and once eager."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import mithril as ml
from mithril_testing import BackendConformanceTests


class TestMlxConformance(BackendConformanceTests):
    backend_factory = staticmethod(lambda dtype: ml.MlxBackend(dtype=dtype))
    dtypes = (ml.float32, ml.float16, ml.bfloat16)
    grad_dtypes = (ml.float32,)
    unsupported = frozenset()
    known_failures: ClassVar[Mapping[str, str]] = {
        name: "a value known only at run time: mx.compile refuses it (UnsupportedPrimitiveError)"
        for name in ("unique", "item")
    }
    jit = True


class TestMlxConformanceEager(TestMlxConformance):
    known_failures: ClassVar[Mapping[str, str]] = {}
    jit = False
