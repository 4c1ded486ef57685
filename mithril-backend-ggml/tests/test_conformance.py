"""The shared conformance suite on the GGML backend: every primitive, forward and gradients, float32."""

import mithril as ml
from mithril_testing import BackendConformanceTests

from mithril_backend_ggml.capabilities import UNSUPPORTED


class TestGGMLConformance(BackendConformanceTests):
    backend_factory = staticmethod(lambda dtype: ml.GGMLBackend(dtype=dtype, seed=0, threads=2))
    dtypes = (ml.float32,)
    grad_dtypes = (ml.float32,)
    unsupported = UNSUPPORTED
