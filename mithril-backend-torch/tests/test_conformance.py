"""The core conformance suite (every primitive x dtype, forward and gradients) on ``TorchBackend``.

Gradients come from ``torch.autograd`` and are checked against finite differences in float64.
"""

from __future__ import annotations

import mithril as ml
from mithril_testing import BackendConformanceTests

from mithril_backend_torch import TorchBackend


class TestTorchConformance(BackendConformanceTests):
    backend_factory = staticmethod(lambda dtype: TorchBackend(dtype=dtype))
    dtypes = (ml.float32, ml.float64)
    grad_dtypes = (ml.float32, ml.float64)
    unsupported = frozenset()
