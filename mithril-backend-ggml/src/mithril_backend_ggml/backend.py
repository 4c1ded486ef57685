"""``GGMLBackend``: compiles a model to ggml compute graphs (forward, and forward+backward when
gradients are requested) that libggml runs on the CPU with the requested number of threads.

Arrays at the boundary are NumPy arrays (float32, int32, bool); ``evaluate`` copies them into the
graph's input tensors, computes, and copies the outputs out.

Example:
    >>> import mithril as ml
    >>> from mithril.models import Linear
    >>> backend = ml.GGMLBackend(threads=2)                                 # doctest: +SKIP
    >>> pm = ml.compile(Linear(4), backend, shapes={"input": [2, 3]})      # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from mithril.extend import NumpyArrays, ThreadedBackend, refuse_wrapping_ints
from mithril.types import Dtype, Kind

from ._lib import load_ggml
from ._program import GGMLProgram
from .ops import fold

__all__ = ["GGMLBackend"]


class GGMLBackend(NumpyArrays, ThreadedBackend[np.ndarray]):
    """Backend running ggml compute graphs (float32 only).

    Args:
        dtype: ``ml.float32`` (ggml's CPU ops compute float tensors in float32).
        threads: CPU threads libggml computes with (default: ``os.cpu_count()``).
        device: ``"cpu"``.
        seed: seed of the generator behind ``randn``, ``randint`` and dropout.
    """

    backend_type: ClassVar[str] = "ggml"
    supports_autograd: ClassVar[bool] = False
    codegen: ClassVar[str] = "ggml"
    supported_dtypes: ClassVar[tuple[Dtype, ...]] = (Dtype.float32,)
    quantize_formats: ClassVar[tuple[str, ...]] = ("q8_0", "q4_0")
    """``ml.compile(quantize=...)``: ggml's block formats for the weights of an inference model."""

    @classmethod
    def available_devices(cls) -> tuple[str, ...]:
        """The CPU, once libggml loads: a missing ggml-python or a wrong libggml version fails here, when the
        backend is created, not at the first compile."""
        load_ggml()
        return super().available_devices()

    # -- dtypes ----------------------------------------------------------------------------------
    def kind_dtype(self, kind: Kind) -> Dtype:
        """float -> float32, int -> int32 (ggml's integer tensor type), bool -> bool."""
        return {"float": self.dtype, "int": Dtype.int32, "bool": Dtype.bool_}[kind]

    def native_dtype(self, dtype: Dtype | Kind | None = None) -> np.dtype:
        resolved = self.resolve_dtype(dtype)
        if resolved is Dtype.bfloat16:
            raise TypeError("GGMLBackend arrays cannot be bfloat16; it computes in float32")
        native: np.dtype = np.dtype(resolved.value)
        return native

    # -- arrays ----------------------------------------------------------------------------------
    def array(self, data: Any, dtype: Dtype | Kind | None = None) -> np.ndarray:
        """An ``np.ndarray``: floats float32, ints int32, bools bool (or the explicit ``dtype``). Integers
        that do not fit the target integer type are refused (a silent wrap-around would turn an
        out-of-range index into a valid one).

        >>> GGMLBackend(threads=1).array([1, 2]).dtype   # doctest: +SKIP
        dtype('int32')
        """
        if dtype is not None:
            target = self.native_dtype(dtype)
            values = np.asarray(data)
            if target.kind in "iu" and values.dtype.kind in "iu":
                refuse_wrapping_ints(type(self).__name__, values, target)
            return np.asarray(values, dtype=target)
        values = np.asarray(data)
        kind = values.dtype.kind
        if kind == "f":
            return values.astype(self.native_dtype(), copy=False)
        if kind in "iu":
            refuse_wrapping_ints(type(self).__name__, values, np.dtype(np.int32))
            return values.astype(np.int32, copy=False)
        if kind == "b":
            return values
        raise TypeError(f"GGMLBackend.array: unsupported data of dtype {values.dtype} ({type(data).__name__})")

    # -- code generation -------------------------------------------------------------------------
    def generate_program(
        self, graph: Any, functions: Sequence[Any], *, param_names: set[str], header: str, quantize: str | None = None
    ) -> GGMLProgram:
        """One ggml context and graph per function (``evaluate``, ``evaluate_gradients``); ``quantize``
        (``ml.compile(quantize="q8_0" | "q4_0")``, inference only): the weights that can be
        (:func:`mithril_backend_c.kernels.quantizable_params`) are ggml tensors of that block type, filled
        from the float32 parameters at every call, and multiplied by ggml's quantized kernels."""
        return GGMLProgram(self, graph, functions, param_names=param_names, header=header, quantize=quantize)

    def evaluate_constant(self, primitive: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> Any:
        """Constant folding with NumPy kernels (the same ones the custom ops use), in float32."""
        return fold(self, primitive, inputs, attrs)
