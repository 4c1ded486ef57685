"""The GGML builder table: primitive name -> function that adds ggml ops for one primitive call.

A builder receives the :class:`~mithril_backend_ggml._program.Builder`, the node and its built inputs
(:class:`~mithril_backend_ggml._program.T`, ``None`` for an absent optional input) and returns the built
outputs by key. Two kinds of entries:

- *native* builders map the primitive to ggml ops (``linear`` -> ``ggml_mul_mat`` + ``ggml_add``,
  ``relu`` -> ``ggml_relu``, ``sum_to_like`` -> ``ggml_sum_rows``, ``conv2d`` -> ``ggml_im2col`` +
  ``ggml_mul_mat`` ...). A native builder raises :class:`Fallback` for a case ggml cannot do exactly (a
  rank above 4, integer operands, asymmetric padding, grouped convolution, ...);
- every other primitive (and every fallback) becomes a ggml *custom op* (``ggml_custom_4d``) whose kernel
  is the NumPy reference of the primitive (:mod:`mithril.testing.references`), run by one ggml thread.

Gradients come from core's generic VJP rules (the backward graph arrives already built); its helper
primitives (``linear_grad_weight``, ``sum_to_like``, ``max_pool2d_grad`` ...) are in this table too.
Primitives with no builder (third-party primitives without a NumPy reference) are reported by core's
capability check as unsupported on ``ggml``.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from mithril.primitives.rules import conv_padding
from mithril.testing.references import REFERENCES

from ._program import Builder, T

__all__ = ["BUILDERS", "NATIVE", "Fallback", "build_node", "fold"]

Built = Mapping[str, T]


class Fallback(Exception):
    """Raised by a native builder for a case ggml cannot compute exactly: use the custom op instead."""


# -- custom ops (NumPy kernels run inside the ggml graph) ------------------------------------------
def _read(tensor: Any, shape: tuple[int, ...], kind: str) -> np.ndarray:
    t = tensor.contents
    dtype = np.int32 if kind == "int" else np.float32
    count = math.prod(shape)
    buffer = (ctypes.c_char * (count * 4)).from_address(t.data)
    array = np.frombuffer(buffer, dtype=dtype, count=count).reshape(shape).copy()
    return array != 0 if kind == "bool" else array


def _write(tensor: Any, array: Any, shape: tuple[int, ...], kind: str) -> None:
    dtype = np.int32 if kind == "int" else np.float32
    count = math.prod(shape)
    buffer = (ctypes.c_char * (count * 4)).from_address(tensor.contents.data)
    np.frombuffer(buffer, dtype=dtype, count=count)[:] = np.broadcast_to(np.asarray(array), shape).reshape(-1)


def _random_kernels(backend: Any) -> dict[str, Callable[..., Any]]:
    """Random primitives draw from the backend's generator at run time (reseeded by ``set_seed``)."""

    def randn(*, shape):
        return backend.rng.standard_normal(tuple(shape))

    def randint(*, low, high, shape):
        return backend.rng.integers(low, high, tuple(shape))

    def dropout_mask(input, *, p, training):
        shape = np.shape(input)
        if not training or p == 0:
            return np.ones(shape)
        keep = backend.rng.random(shape) >= p
        return keep / (1.0 - p)

    return {"randn": randn, "randint": randint, "dropout_mask": dropout_mask}


def kernel(backend: Any, primitive: str) -> Callable[..., Any]:
    random = _random_kernels(backend)
    return random.get(primitive) or REFERENCES[primitive]


def custom(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    """The primitive as ggml custom ops: one per output, computing the NumPy kernel on one thread."""
    ggml = b.ggml
    fn = kernel(b.backend, node.spec.name)
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
        if static is None and node.spec.name == "lambda":
            # the user function's result shape: probe it once on zeros shaped like its input
            x = present[0][1]
            probe = np.zeros(x.shape, np.int32 if x.kind == "int" else np.float32)
            static = np.shape(fn(probe if x.kind != "bool" else probe != 0, **attrs))
        shape = tuple(int(d) for d in static)

        def run(dst: Any, ith: int, nth: int, userdata: Any, *, shape=shape, kind=kind, index=index) -> None:
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
                errors.append(type(exc)(f"{node.path or node.spec.name} ({node.spec.name}) in a ggml custom op: {exc}"))

        callback = ggml.ggml_custom_op_t(run)
        b.callbacks.append(callback)
        srcs = (ctypes.POINTER(ggml.ggml_tensor) * max(1, len(present)))(*[t.tensor for _, t in present])
        ne = b.ne(shape)
        tensor = ggml.ggml_custom_4d(b.ctx, b.ggml_type(kind), *ne, srcs, len(present), callback, 1, None)
        outs[key] = T(tensor, shape, kind)
    return outs


# -- native builders -------------------------------------------------------------------------------
NATIVE: dict[str, Callable[..., Built]] = {}
"""Primitives (or cases of them) computed by ggml's own ops."""


def native(*names: str) -> Callable[[Callable[..., Built]], Callable[..., Built]]:
    def register(fn: Callable[..., Built]) -> Callable[..., Built]:
        for name in names:
            NATIVE[name] = fn
        return fn

    return register


def _floats(*ts: T | None) -> None:
    if any(t is not None and t.kind != "float" for t in ts):
        raise Fallback("non-float operand")


def _out(node: Any) -> tuple[tuple[int, ...], str]:
    value = node.output
    return tuple(int(d) for d in value.shape.static()), value.kind or "float"


_UNARY = {
    "neg": "ggml_neg", "abs": "ggml_abs", "sign": "ggml_sgn", "exp": "ggml_exp", "log": "ggml_log",
    "sqrt": "ggml_sqrt", "square": "ggml_sqr", "sin": "ggml_sin", "cos": "ggml_cos", "tanh": "ggml_tanh",
    "sigmoid": "ggml_sigmoid", "relu": "ggml_relu",
}


@native(*_UNARY)
def _unary(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    x = args["input"]
    _floats(x)
    return {"output": b.wrap(getattr(b.ggml, _UNARY[node.spec.name])(b.ctx, x.tensor), x.shape)}


@native("leaky_relu")
def _leaky_relu(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    x = args["input"]
    _floats(x)
    return {"output": b.wrap(b.ggml.ggml_leaky_relu(b.ctx, x.tensor, float(node.attrs["slope"]), False), x.shape)}


_BINARY = {"add": "ggml_add", "subtract": "ggml_sub", "multiply": "ggml_mul", "divide": "ggml_div"}


def _binary(b: Builder, op: str, left: T, right: T, shape: tuple[int, ...]) -> T:
    """``left op right`` with NumPy broadcasting: ggml broadcasts only its second operand."""
    if left.shape != shape:
        if op in ("ggml_add", "ggml_mul") and right.shape == shape:
            left, right = right, left
        else:
            left = b.broadcast(left, shape)
    return b.wrap(getattr(b.ggml, op)(b.ctx, left.tensor, right.tensor), shape)


@native(*_BINARY)
def _arith(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    left, right = args["left"], args["right"]
    shape, kind = _out(node)
    _floats(left, right)
    if kind != "float" or len(shape) > 4:
        raise Fallback("non-float result")
    op = _BINARY[node.spec.name]
    if op == "ggml_sub" and left.shape != shape and right.shape == shape:  # c - x = (-x) + c
        negated = b.wrap(b.ggml.ggml_neg(b.ctx, right.tensor), shape)
        return {"output": _binary(b, "ggml_add", negated, left, shape)}
    return {"output": _binary(b, op, left, right, shape)}


@native("greater", "less")
def _compare(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    """``a > b`` as ``step(a - b)`` (exact for finite floats); bools are F32 0/1 inside the graph."""
    left, right = args["left"], args["right"]
    _floats(left, right)
    if node.spec.name == "less":
        left, right = right, left
    shape, _ = _out(node)
    zero_key = "left" if node.spec.name == "less" else "right"
    zero = node.inputs[zero_key]
    if zero.is_constant and zero.producer is None and np.all(np.asarray(zero.const) == 0) and left.shape == shape:
        return {"output": T(b.ggml.ggml_step(b.ctx, left.tensor), shape, "bool")}  # relu's mask: step(x)
    diff = _arith_sub(b, left, right, shape)
    return {"output": T(b.ggml.ggml_step(b.ctx, diff.tensor), shape, "bool")}


def _arith_sub(b: Builder, left: T, right: T, shape: tuple[int, ...]) -> T:
    if left.shape != shape and right.shape == shape:
        return _binary(b, "ggml_add", b.wrap(b.ggml.ggml_neg(b.ctx, right.tensor), shape), left, shape)
    return _binary(b, "ggml_sub", left, right, shape)


@native("where")
def _where(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    """``where(mask, x, 0)`` (and ``where(mask, 0, x)``) as a product with the 0/1 mask."""
    cond, left, right = args["condition"], args["left"], args["right"]
    shape, kind = _out(node)
    if kind != "float" or cond.kind != "bool" or left.kind != "float" or right.kind != "float":
        raise Fallback("where on non-floats")
    inputs = node.inputs

    def is_zero(key: str) -> bool:
        v = inputs[key]
        return v.is_constant and v.producer is None and np.all(np.asarray(v.const) == 0)

    if is_zero("right"):
        return {"output": _binary(b, "ggml_mul", b.wrap(cond.tensor, cond.shape), left, shape)}
    if is_zero("left"):
        one = b.const(1.0, "float")
        inverse = _binary(b, "ggml_sub", b.broadcast(one, cond.shape), b.wrap(cond.tensor, cond.shape), cond.shape)
        return {"output": _binary(b, "ggml_mul", inverse, right, shape)}
    raise Fallback("general where")


@native("matmul")
def _matmul(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    left, right = args["left"], args["right"]
    shape, _ = _out(node)
    _floats(left, right)
    if len(left.shape) < 2 or len(right.shape) < 2 or len(shape) > 4:
        raise Fallback("1-D matmul")
    m, k = left.shape[-2:]
    n = right.shape[-1]
    batch = shape[:-2]
    lb, rb = left.shape[:-2], right.shape[:-2]
    if (1,) * (len(batch) - len(lb)) + tuple(lb) != tuple(batch):
        left = b.broadcast(left, (*batch, m, k))
    # ggml_mul_mat(a, b): a ne=(k, n, ...), b ne=(k, m, ...) -> ne=(n, m, ...); a broadcasts over b's batch
    rt = b.permute(right, (*range(len(rb)), len(rb) + 1, len(rb)))
    if any(bb % max(r, 1) for bb, r in zip(reversed(batch), reversed(rb))):
        raise Fallback("batch broadcast")
    out = b.ggml.ggml_mul_mat(b.ctx, rt.tensor, left.tensor)
    return {"output": b.wrap(out, shape)}


@native("linear")
def _linear(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    x, w, bias = args["input"], args["weight"], args["bias"]
    _floats(x, w, bias)
    shape, _ = _out(node)
    if len(x.shape) > 4:
        raise Fallback("rank > 4")
    # weight [d, k] is ne=(k, d); input [..., k] is ne=(k, ...): mul_mat gives ne=(d, ...) = [..., d]
    y = b.wrap(b.ggml.ggml_mul_mat(b.ctx, w.tensor, x.tensor), shape)
    if bias is not None:
        y = _binary(b, "ggml_add", y, bias, shape)
    return {"output": y}


@native("linear_grad_weight")
def _linear_grad_weight(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    """``g[..., d]^T @ x[..., k]`` -> ``[d, k]``: mul_mat of the transposed, flattened operands."""
    g, x = args["output_grad"], args["input"]
    _floats(g, x)
    d, k = g.shape[-1], x.shape[-1]
    rows = math.prod(g.shape[:-1])
    gt = b.permute(b.reshape(g, (rows, d)), (1, 0))  # [d, rows]
    xt = b.permute(b.reshape(x, (rows, k)), (1, 0))  # [k, rows]
    return {"output": b.wrap(b.ggml.ggml_mul_mat(b.ctx, xt.tensor, gt.tensor), (d, k))}


def _axes(axis: Any, rank: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(rank))
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(sorted(a % rank for a in items))


def _sum_keepdim(b: Builder, x: T, axes: tuple[int, ...]) -> T:
    """Sum over ``axes`` keeping them as 1s: move them last (one contiguous copy unless they already
    are), then one multithreaded ``ggml_sum_rows`` over the flattened reduced block."""
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if kept == x.shape:
        return x
    rest = [i for i in range(len(x.shape)) if i not in axes]
    moved = b.permute(x, [*rest, *axes])
    rows = math.prod(x.shape[i] for i in rest)
    flat = b.reshape(moved, (rows, math.prod(x.shape[a] for a in axes)))
    return b.reshape(b.wrap(b.ggml.ggml_sum_rows(b.ctx, flat.tensor), (rows, 1)), kept)


@native("sum", "mean")
def _sum(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    x = args["input"]
    _floats(x)
    shape, _ = _out(node)
    if len(x.shape) > 4:
        raise Fallback("rank > 4")
    axes = _axes(node.attrs["axis"], len(x.shape))
    if len(axes) == len(x.shape) and x.shape:
        total = b.wrap(b.ggml.ggml_sum(b.ctx, x.tensor), ())
    else:
        total = _sum_keepdim(b, x, axes)
    if node.spec.name == "mean":
        count = math.prod(x.shape[a] for a in axes)
        total = b.wrap(b.ggml.ggml_scale(b.ctx, total.tensor, 1.0 / max(count, 1)), total.shape)
    return {"output": b.reshape(total, shape)}


@native("sum_to_like")
def _sum_to_like(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    x, like = args["input"], args["like"]
    _floats(x)
    shape, _ = _out(node)
    if x.shape == shape:
        return {"output": x}
    if len(x.shape) > 4:
        raise Fallback("rank > 4")
    lead = len(x.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1)
    return {"output": b.reshape(_sum_keepdim(b, x, axes), shape)}


@native("broadcast_to", "broadcast_to_like")
def _broadcast_to(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    x = args["input"]
    shape, _ = _out(node)
    if len(shape) > 4 or x.kind == "int":
        raise Fallback("rank > 4")
    return {"output": b.broadcast(x, shape)}


@native("softmax")
def _softmax(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    x = args["input"]
    _floats(x)
    r = len(x.shape)
    if r == 0 or r > 4:
        raise Fallback("rank")
    axis = node.attrs["axis"] % r
    order = [*(i for i in range(r) if i != axis), axis]
    moved = b.permute(x, order)
    y = b.wrap(b.ggml.ggml_soft_max(b.ctx, moved.tensor), moved.shape)
    return {"output": b.permute(y, [order.index(i) for i in range(r)])}


@native("reshape", "reshape_like", "flatten", "squeeze", "unsqueeze")
def _reshape(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    x = args["input"]
    shape, _ = _out(node)
    if len(shape) > 4 or len(x.shape) > 4:
        raise Fallback("rank > 4")
    return {"output": b.reshape(x, shape)}


@native("transpose", "swapaxes")
def _transpose(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    x = args["input"]
    r = len(x.shape)
    if r > 4 or x.kind == "int":
        raise Fallback("rank > 4")
    if node.spec.name == "swapaxes":
        axes = list(range(r))
        i, j = node.attrs["axis1"] % r, node.attrs["axis2"] % r
        axes[i], axes[j] = axes[j], axes[i]
    else:
        axes = list(range(r))[::-1] if node.attrs["axes"] is None else [a % r for a in node.attrs["axes"]]
    return {"output": b.permute(x, axes)}


@native("concat")
def _concat(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    parts = [t for t in args.values() if t is not None]
    shape, kind = _out(node)
    if len(shape) > 4 or any(t.kind != kind for t in parts):
        raise Fallback("rank > 4")
    dim = len(shape) - 1 - node.attrs["axis"] % len(shape)
    acc = parts[0]
    for t in parts[1:]:
        merged = list(acc.shape)
        merged[node.attrs["axis"] % len(shape)] += t.shape[node.attrs["axis"] % len(shape)]
        acc = T(b.ggml.ggml_concat(b.ctx, acc.tensor, t.tensor, dim), tuple(merged), kind)
    return {"output": acc}


def _conv2d_geometry(node: Any, x: T, w: T) -> tuple[int, int, int, int, int, int]:
    attrs = node.attrs
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
    stride, dilation = pair(attrs["stride"]), pair(attrs["dilation"])
    pads = conv_padding(attrs["padding"], w.shape[2:], dilation, stride)
    if attrs["groups"] != 1 or any(p0 != p1 for p0, p1 in pads):
        raise Fallback("grouped or asymmetric convolution")
    # ggml's (s0, s1, p0, p1, d0, d1): index 0 is the width (fastest) axis
    return stride[1], stride[0], pads[1][0], pads[0][0], dilation[1], dilation[0]


@native("conv2d")
def _conv2d(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    x, w, bias = args["input"], args["weight"], args["bias"]
    _floats(x, w, bias)
    shape, _ = _out(node)
    if len(x.shape) != 4:
        raise Fallback("unbatched conv")
    s0, s1, p0, p1, d0, d1 = _conv2d_geometry(node, x, w)
    y = b.wrap(b.ggml.ggml_conv_2d(b.ctx, w.tensor, x.tensor, s0, s1, p0, p1, d0, d1), shape)
    if bias is not None:
        y = _binary(b, "ggml_add", y, b.reshape(bias, (1, shape[1], 1, 1)), shape)
    return {"output": y}


@native("conv2d_grad_weight")
def _conv2d_grad_weight(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    """``dW[o, c*kh*kw] = sum_{n, oh, ow} g[n, o, oh, ow] * im2col(x)[n, oh, ow, c*kh*kw]``."""
    g, x, like = args["output_grad"], args["input"], args["like"]
    _floats(g, x)
    if len(x.shape) != 4:
        raise Fallback("unbatched conv")
    s0, s1, p0, p1, d0, d1 = _conv2d_geometry(node, x, like)
    ggml = b.ggml
    o, c, kh, kw = like.shape
    n, _, oh, ow = g.shape
    cols = ggml.ggml_im2col(b.ctx, like.tensor, x.tensor, s0, s1, p0, p1, d0, d1, True, ggml.GGML_TYPE_F32)
    cols = b.wrap(cols, (n, oh, ow, c * kh * kw))
    cols_t = b.permute(b.reshape(cols, (n * oh * ow, c * kh * kw)), (1, 0))  # [ckk, P]
    g_t = b.permute(g, (1, 0, 2, 3))  # [o, n, oh, ow]
    g_t = b.reshape(g_t, (o, n * oh * ow))
    dw = ggml.ggml_mul_mat(b.ctx, cols_t.tensor, g_t.tensor)  # ne=(ckk, o) = [o, ckk]
    return {"output": b.reshape(b.wrap(dw, (o, c * kh * kw)), like.shape)}


def _pool_geometry(node: Any, x: T) -> tuple[int, int, int, int]:
    attrs = node.attrs
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
    k = pair(attrs["kernel_size"])
    s = pair(attrs["stride"] if attrs["stride"] is not None else attrs["kernel_size"])
    if pair(attrs["dilation"]) != (1, 1) or pair(attrs["padding"]) != (0, 0) or len(x.shape) != 4:
        raise Fallback("padded or dilated pooling")
    return k[1], k[0], s[1], s[0]


@native("max_pool2d", "avg_pool2d")
def _pool(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    x = args["input"]
    _floats(x)
    shape, _ = _out(node)
    k0, k1, s0, s1 = _pool_geometry(node, x)
    op = b.ggml.GGML_OP_POOL_MAX if node.spec.name == "max_pool2d" else b.ggml.GGML_OP_POOL_AVG
    return {"output": b.wrap(b.ggml.ggml_pool_2d(b.ctx, x.tensor, op, k0, k1, s0, s1, 0.0, 0.0), shape)}


@native("embedding")
def _embedding(b: Builder, node: Any, args: Mapping[str, T | None]) -> Built:
    idx, w = args["input"], args["weight"]
    shape, _ = _out(node)
    if idx.kind != "int" or w.kind != "float" or len(w.shape) != 2 or len(shape) > 4:
        raise Fallback("embedding layout")
    flat = b.reshape(idx, (math.prod(idx.shape),))  # get_rows takes a vector of row indices
    rows = b.wrap(b.ggml.ggml_get_rows(b.ctx, w.tensor, flat.tensor), (flat.shape[0], w.shape[1]))
    return {"output": b.reshape(rows, shape)}


# -- dispatch --------------------------------------------------------------------------------------
def build_node(b: Builder, node: Any, args: Mapping[str, T | None]) -> tuple[Built, str]:
    """Build one primitive call: natively where possible, as a custom op otherwise."""
    builder = NATIVE.get(node.spec.name)
    if builder is not None and all(t is None or len(t.shape) <= 4 for t in args.values()):
        try:
            return builder(b, node, args), "native"
        except Fallback:
            pass
    return custom(b, node, args), "custom op (NumPy kernel)"


def _table() -> dict[str, Callable[..., Any]]:
    from mithril.plugins import registry

    names = set(NATIVE) | set(REFERENCES) | {"randn", "randint", "dropout_mask"}
    return {name: build_node for name in sorted(names & set(registry().primitives))}


class _Builders(Mapping[str, Callable[..., Any]]):
    """Lazy mapping (the registry is complete only after every plugin registered its primitives)."""

    def __init__(self) -> None:
        self._table: dict[str, Callable[..., Any]] | None = None

    def _get(self) -> dict[str, Callable[..., Any]]:
        if self._table is None:
            self._table = _table()
        return self._table

    def __getitem__(self, key: str) -> Callable[..., Any]:
        return self._get()[key]

    def __iter__(self) -> Any:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


BUILDERS: Mapping[str, Callable[..., Any]] = _Builders()
"""Primitive name -> builder: the capability table of the ``ggml`` backend."""


def fold(backend: Any, primitive: str, inputs: Any, attrs: Mapping[str, Any]) -> Any:
    """Constant folding at compile time with the NumPy kernels, rounded to float32/int32."""
    fn = REFERENCES.get(primitive)
    if fn is None:
        return NotImplemented
    result = fn(*inputs, **attrs)
    if isinstance(result, tuple):
        return tuple(_round(r) for r in result)
    return _round(result)


def _round(value: Any) -> Any:
    array = np.asarray(value)
    if array.dtype.kind == "f":
        return array.astype(np.float32)
    if array.dtype.kind in "iu":
        return array.astype(np.int32)
    return array
