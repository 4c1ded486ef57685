"""The core op x dtype conformance suite, run on the JAX backend.

``TestJaxConformance`` runs eagerly (``jit=False``: hundreds of one-primitive models, each jit compile
would dominate): forward in float32 and float64, finite-difference gradient checks in float64.
``TestJaxConformanceJit`` repeats the float32 forward cases through ``jax.jit`` so every implementation
is checked to trace; gradients under jit are covered by the whole-model tests in ``test_backend.py``.
"""

from __future__ import annotations

import mithril as ml
from mithril_testing import BackendConformanceTests


class TestJaxConformance(BackendConformanceTests):
    backend_factory = staticmethod(lambda dtype: ml.JaxBackend(dtype=dtype, jit=False))
    dtypes = (ml.float32, ml.float64)
    grad_dtypes = (ml.float32, ml.float64)
    unsupported = frozenset()


RUN_TIME_VALUES = {
    name: "a value known only at run time: jax.jit refuses it with UnsupportedPrimitiveError (runs with jit=False)"
    for name in ("unique", "item")
}


class TestJaxConformanceJit(BackendConformanceTests):
    backend_factory = staticmethod(lambda dtype: ml.JaxBackend(dtype=dtype, jit=True))
    dtypes = (ml.float32,)
    grad_dtypes = ()
    unsupported = frozenset()
    known_failures = RUN_TIME_VALUES
    jit = True
