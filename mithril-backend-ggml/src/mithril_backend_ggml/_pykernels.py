"""The last-resort custom op: a Python callback, for ``lambda`` only.

``lambda`` applies a user's Python callable, which no generated C can run (it is also the C backend's
one declared gap). Its ggml custom op is a ctypes callback: it runs on ggml thread 0, *takes the GIL*
for the duration of the call, and reads/writes the tensors as NumPy arrays. Every other primitive the
native builders cannot express runs as a C kernel (:mod:`~mithril_backend_ggml._ckernels`).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ._builder import Builder, T

__all__ = ["PYTHON_KERNELS", "python_custom"]


def _lambda(input: Any, *, fn: Callable[[Any], Any], same_shape: bool = False) -> np.ndarray:
    return np.asarray(fn(input))


PYTHON_KERNELS: dict[str, Callable[..., Any]] = {"lambda": _lambda}
"""Primitives computed by a Python callback inside the ggml graph (GIL held while it runs)."""


def _read(tensor: Any, shape: tuple[int, ...], kind: str) -> np.ndarray:
    dtype = np.int32 if kind == "int" else np.float32
    count = math.prod(shape)
    buffer = (ctypes.c_char * (count * 4)).from_address(tensor.contents.data)
    array = np.frombuffer(memoryview(buffer).cast("B"), dtype=dtype, count=count).reshape(shape).copy()
    return array != 0 if kind == "bool" else array


def _write(tensor: Any, array: Any, shape: tuple[int, ...], kind: str) -> None:
    dtype = np.int32 if kind == "int" else np.float32
    count = math.prod(shape)
    buffer = (ctypes.c_char * (count * 4)).from_address(tensor.contents.data)
    target = np.frombuffer(memoryview(buffer).cast("B"), dtype=dtype, count=count)
    target[:] = np.broadcast_to(np.asarray(array), shape).reshape(-1)


def python_custom(b: Builder, node: Any, args: Mapping[str, T | None]) -> dict[str, T]:
    """``node`` as ggml custom ops (one per output) running its Python kernel on ggml thread 0."""
    name = node.spec.name
    fn = PYTHON_KERNELS.get(name)
    if fn is None:
        raise NotImplementedError(f"GGMLBackend has neither a ggml op nor a C kernel for {name!r}")
    ggml = b.ggml
    attrs = dict(node.attrs)
    keys = list(args)
    present = [(k, t) for k, t in args.items() if t is not None]
    out_keys = list(node.outputs)
    errors = b.errors
    outs: dict[str, T] = {}
    for index, key in enumerate(out_keys):
        value = node.outputs[key]
        kind = value.kind or "float"
        static = value.shape.static()
        if static is None:
            # the user function's result shape: probe it once on zeros shaped like its input
            x = present[0][1]
            probe = np.zeros(x.shape, np.int32 if x.kind == "int" else np.float32)
            static = np.shape(fn(probe if x.kind != "bool" else probe != 0, **attrs))
        shape = tuple(int(d) for d in static)

        def run(
            dst: Any,
            ith: int,
            nth: int,
            userdata: Any,
            *,
            shape: tuple[int, ...] = shape,
            kind: str = kind,
            index: int = index,
        ) -> None:
            if ith != 0:
                return
            try:
                src = dst.contents.src
                arrays = {k: _read(src[i], t.shape, t.kind) for i, (k, t) in enumerate(present)}
                result = fn(*[arrays.get(k) for k in keys], **attrs)
                if len(out_keys) > 1:
                    result = result[index]
                _write(dst, result, shape, kind)
            except BaseException as exc:  # an exception cannot cross the C frames: report it after compute
                errors.append(type(exc)(f"{node.path or name} ({name}) in a ggml custom op: {exc}"))

        callback = ggml.ggml_custom_op_t(run)
        b.callbacks.append(callback)
        srcs = (ctypes.POINTER(ggml.ggml_tensor) * max(1, len(present)))(*[t.tensor for _, t in present])
        tensor = ggml.ggml_custom_4d(b.ctx, b.ggml_type(kind), *b.ne(shape), srcs, len(present), callback, 1, None)
        outs[key] = T(tensor, shape, kind)
    b.custom_kinds.append((name, "python"))
    return outs
