"""The shared conformance suite on the NumPy backend: every primitive, forward and gradients."""

import mithril as ml
from mithril_testing import BackendConformanceTests


class TestNumpyConformance(BackendConformanceTests):
    backend_factory = staticmethod(lambda dtype: ml.NumpyBackend(dtype=dtype, seed=0))
    dtypes = (ml.float32, ml.float64)
    grad_dtypes = (ml.float32, ml.float64)
    unsupported = frozenset()
