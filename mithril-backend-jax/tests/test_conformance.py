"""The core op x dtype conformance suite, run on the JAX backend (eagerly: jit is tested elsewhere).

Forward in float32 and float64, finite-difference gradient checks in float64.
"""

from __future__ import annotations

import mithril as ml
from mithril.testing import BackendConformanceTests


class TestJaxConformance(BackendConformanceTests):
    backend_factory = staticmethod(lambda dtype: ml.JaxBackend(dtype=dtype, jit=False))
    dtypes = (ml.float32, ml.float64)
    grad_dtypes = (ml.float64,)
    unsupported = frozenset()
