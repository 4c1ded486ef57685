"""The core conformance suite on GPU devices, for ``bench/gpu_check.py`` (``make gpu-check``).

The devices come from the environment, so this file collects nothing on a machine without a GPU:
``MITHRIL_GPU_TORCH`` (``cuda``) runs it on ``TorchBackend(device=...)`` and ``MITHRIL_GPU_JAX`` (``gpu``) on
``JaxBackend(device=...)`` eagerly, as the packages' own ``test_conformance.py`` do on the CPU.

    MITHRIL_GPU_TORCH=cuda python -m pytest bench/gpu_conformance.py -q -p no:randomly
"""

from __future__ import annotations

import os

import mithril as ml
from mithril_testing import BackendConformanceTests

TORCH_DEVICE = os.environ.get("MITHRIL_GPU_TORCH", "")
JAX_DEVICE = os.environ.get("MITHRIL_GPU_JAX", "")


class _OnDevice(BackendConformanceTests):
    dtypes = (ml.float32, ml.float64)
    grad_dtypes = (ml.float64,)
    unsupported = frozenset()


if TORCH_DEVICE:

    class TestTorchOnGPU(_OnDevice):
        backend_factory = staticmethod(lambda dtype: ml.TorchBackend(dtype=dtype, device=TORCH_DEVICE))


if JAX_DEVICE:

    class TestJaxOnGPU(_OnDevice):
        backend_factory = staticmethod(lambda dtype: ml.JaxBackend(dtype=dtype, device=JAX_DEVICE, jit=False))
