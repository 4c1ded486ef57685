"""What a ggml primitive builder sees: :class:`Builder` (the ggml contexts, the C kernels of the program
being built and helpers that make tensors of Mithril shapes) and :class:`T` (a built value).

The lowest layer of the graph builders: the native builders (:mod:`~mithril_backend_ggml.ops`), the Python
custom op (:mod:`~mithril_backend_ggml._pykernels`) and the program that drives them
(:mod:`~mithril_backend_ggml._program`) import it; it imports none of them.

Example (inside a builder)::

    def relu(b: Builder, node, args):
        x = args["input"]
        return {"output": T(b.ggml.ggml_relu(b.ctx, x.tensor), x.shape, x.kind)}
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from mithril.errors import ShapeError
from mithril_backend_c.kernels import ALIAS_PRIMITIVES, IndexSite

from ._ckernels import CKernels, slot_address, trampoline
from ._lib import load_ggml

__all__ = ["Builder", "T"]


class T(NamedTuple):
    """A built value: its ggml tensor, Mithril (row-major) shape and kind. Always contiguous."""

    tensor: Any
    shape: tuple[int, ...]
    kind: str


class Builder:
    """What a primitive builder sees: the ggml context and helpers to make tensors of Mithril shapes."""

    def __init__(self, backend: Any, ckernels: CKernels, ctx: Any, const_ctx: Any) -> None:
        self.ggml = load_ggml()
        self.backend = backend
        self.ckernels = ckernels  # the C custom ops of the graph's program
        self.ctx = ctx
        self.const_ctx = const_ctx
        self.constants: list[tuple[Any, np.ndarray]] = []
        self.callbacks: list[Any] = []  # ctypes callbacks of custom ops, kept alive with the graph
        self._permuted: dict[tuple[int, tuple[int, ...], tuple[int, ...]], T] = {}
        # result tensor address -> (source, axes) for the copies made by ``permute``, so that a transpose
        # of a transpose reads the source instead of copying twice
        self._permute_source: dict[int, tuple[T, tuple[int, ...]]] = {}
        self.errors: list[BaseException] = []  # exceptions raised inside custom ops during a compute
        self.custom_kinds: list[tuple[str, str]] = []  # (primitive, "c" | "python") of every custom op built
        self.slots: list[Any] = []  # slots of this graph's C kernels (their error reports are read after compute)
        self.input_names: dict[int, str] = {}  # value id -> key of the function input it is
        self.faithful = False  # a program with quantized weights: floats computed by the C kernels

    def checked_indices(self, node: Any, operand: str, index: T, bound: int) -> T:
        """``index`` (I32) as read through a kernel that checks every element against ``[0, bound)``:
        a bad one is reported after the compute (``IndexRangeError``) and replaced by 0 for the native op
        that reads the result, which would otherwise abort the process (``ggml_get_rows``)."""
        value = node.inputs[operand]
        while value.producer is not None and value.producer.spec.name in ALIAS_PRIMITIVES:
            value = next(v for v in value.producer.inputs.values() if v is not None)
        static = value.shape.static()
        shape = tuple(int(d) for d in static) if static is not None else index.shape
        site = IndexSite(
            node.spec.name, node.path, operand, int(bound), value.id, self.input_names.get(value.id), shape
        )
        slot = self.ckernels.guard(math.prod(index.shape), bound, site)
        self.callbacks.append(slot)
        self.slots.append(slot)
        ggml = self.ggml
        srcs = (ctypes.POINTER(ggml.ggml_tensor) * 1)(index.tensor)
        fn = ggml.ggml_custom_op_t(trampoline())
        tensor = ggml.ggml_custom_4d(
            self.ctx, ggml.GGML_TYPE_I32, *self.ne(index.shape), srcs, 1, fn, 1, slot_address(slot)
        )
        self.custom_kinds.append(("index check", "c"))
        return T(tensor, index.shape, "int")

    # -- tensors -----------------------------------------------------------------------------------
    def is_quantized(self, t: T | None) -> bool:
        """Whether ``t`` is a block-quantized weight (``ml.compile(quantize=...)``): a 2-d ggml tensor
        ``[rows, k]`` (a convolution's ``[O, C * kh * kw]``) that only ggml's own ops can read."""
        return t is not None and t.tensor.contents.type in (self.ggml.GGML_TYPE_Q8_0, self.ggml.GGML_TYPE_Q4_0)

    def ggml_type(self, kind: str) -> int:
        return int(self.ggml.GGML_TYPE_I32 if kind == "int" else self.ggml.GGML_TYPE_F32)

    @staticmethod
    def ne(shape: Sequence[int]) -> list[int]:
        """ggml dims of a row-major shape (4 at most; larger ranks are stored flat)."""
        if len(shape) > 4:
            return [math.prod(shape), 1, 1, 1]
        ne = [int(d) for d in reversed(shape)]
        return ne + [1] * (4 - len(ne))

    def new(self, shape: Sequence[int], kind: str, ctx: Any = None) -> Any:
        ne = self.ne(shape)
        return self.ggml.ggml_new_tensor_4d(ctx or self.ctx, self.ggml_type(kind), *ne)

    def const(self, value: Any, kind: str) -> T:
        """A constant tensor (filled once, after allocation)."""
        dtype = np.int32 if kind == "int" else np.float32
        array = np.array(value, dtype=dtype, order="C")  # not ascontiguousarray: it makes a 0-d value 1-d
        tensor = self.new(array.shape, kind, self.const_ctx)
        self.constants.append((tensor, array))
        return T(tensor, tuple(array.shape), kind)

    def reshape(self, x: T, shape: Sequence[int]) -> T:
        """A reshape view; none when ggml's dims do not change (``[d, 1]`` -> ``[d]``), and a reshape
        of a reshape views the first source (no chains of view nodes)."""
        shape = tuple(int(d) for d in shape)
        if shape == x.shape:
            return x
        tensor = x.tensor
        if list(tensor.contents.ne) == self.ne(shape):
            return T(tensor, shape, x.kind)
        ggml = self.ggml
        if tensor.contents.op == ggml.GGML_OP_RESHAPE and tensor.contents.view_src:
            tensor = tensor.contents.src[0]
            if list(tensor.contents.ne) == self.ne(shape):
                return T(tensor, shape, x.kind)
        return T(ggml.ggml_reshape_4d(self.ctx, tensor, *self.ne(shape)), shape, x.kind)

    def broadcast(self, x: T, shape: Sequence[int]) -> T:
        """``np.broadcast_to`` (a ggml_repeat); rank is aligned from the fastest dim."""
        shape = tuple(shape)
        if x.shape == shape:
            return x
        tail = shape[len(shape) - len(x.shape) :] if len(x.shape) <= len(shape) else None
        if tail is None or any(s not in (1, t) for s, t in zip(x.shape, tail, strict=True)):
            # NumPy's rule; ggml_repeat would tile instead, or abort the process (GGML_ASSERT)
            raise ShapeError(
                f"GGMLBackend: cannot broadcast shape {list(x.shape)} to {list(shape)} (NumPy broadcasting)"
            )
        return T(self.ggml.ggml_repeat_4d(self.ctx, x.tensor, *self.ne(shape)), shape, x.kind)

    def permute(self, x: T, axes: Sequence[int]) -> T:
        """``np.transpose(x, axes)`` made contiguous, with three peepholes: a permutation that moves only
        size-1 axes is a reshape (no copy); a permutation of a permuted copy permutes the copy's source
        (a transpose of a transpose is the source itself, e.g. the ``swapaxes`` that generic ``matmul``
        gradients emit, fed to a ``matmul`` whose right operand ggml wants transposed); and one copy per
        (tensor, axes) is made however many builders ask for it."""
        r = len(x.shape)
        axes = tuple(int(a) for a in axes)
        if axes == tuple(range(r)):
            return x
        shape = tuple(x.shape[a] for a in axes)
        if [a for a in axes if x.shape[a] != 1] == [a for a in range(r) if x.shape[a] != 1]:
            return self.reshape(x, shape)
        addr = ctypes.addressof(x.tensor.contents)
        origin = self._permute_source.get(addr)
        if origin is not None and tuple(origin[0].shape[a] for a in origin[1]) == x.shape:
            source, first = origin
            return self.permute(source, tuple(first[a] for a in axes))
        key = (addr, x.shape, axes)  # (a reshape that keeps ggml's dims shares the tensor)
        if key in self._permuted:  # e.g. g^T, needed by both linear_grad_weight and sum_to_like
            return self._permuted[key]
        pos = list(range(4))
        for i, a in enumerate(axes):
            pos[r - 1 - a] = r - 1 - i
        view = self.ggml.ggml_permute(self.ctx, x.tensor, *pos)
        result = T(self.ggml.ggml_cont(self.ctx, view), shape, x.kind)
        self._permuted[key] = result
        self._permute_source[ctypes.addressof(result.tensor.contents)] = (x, axes)
        return result

    def wrap(self, tensor: Any, shape: Sequence[int], kind: str = "float") -> T:
        return T(tensor, tuple(int(d) for d in shape), kind)
