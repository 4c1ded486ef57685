"""Plain-NumPy reference implementations of every core primitive (thinc's reference ``Ops``, in spirit).

Each function follows the calling convention of backend implementations: inputs positional in the
primitive's input-key order (``None`` for an absent optional input), attributes keyword-only:

    >>> import numpy as np
    >>> from mithril_testing.references import REFERENCES
    >>> REFERENCES["add"](np.ones(3), np.ones(3)).tolist()
    [2.0, 2.0, 2.0]

They are written from the primitive specs' docs (NumPy / PyTorch semantics), independently of every
backend, and favour clarity over speed: convolutions and pooling are loops over kernel offsets. Floats
are computed in whatever precision the inputs have; the conformance suite feeds float64.

The only shared code is :func:`mithril.extend.window_attributes` (normalising a padding spec).
Random primitives (``randn``, ``randint``, ``dropout_mask``) have references that draw from a private
NumPy generator: only their shapes, kinds and distributions are comparable, never their values.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import typing
from collections.abc import Callable, Iterator, Sequence
from types import EllipsisType
from typing import Any, TypeVar

import numpy as np
from mithril.extend import window_attributes
from mithril.types import Dtype

__all__ = ["REFERENCES", "finite_max", "numpy_dtype", "reference"]

Array = np.ndarray
"""What references take and return: NumPy arrays (NumPy scalars too, where NumPy gives one: a reduction
over every axis). ``typing.cast(Array, ...)`` marks NumPy results its stubs type as ``Any``."""
Scalar = bool | int | float | complex
Axis = int | Sequence[int] | None
Window = int | Sequence[int]
"""A kernel size, stride or dilation: one for every spatial axis, or one per axis."""
Padding = Any
"""A padding spec as :func:`mithril.extend.window_attributes` reads it (an int, per-axis ints or
``(before, after)`` pairs, ``"valid"``, ``"same"``)."""
Pads = Sequence[tuple[int, int]]
Index = tuple[EllipsisType | slice | int, ...]
"""A key of ellipses, slices and ints (annotated: mypy infers ``x[(..., *slices)]`` from the first of
``ndarray.__getitem__``'s overloads and rejects it)."""
DtypeLike = Dtype | str | np.dtype | type | None
"""An ``ml.Dtype``, its name or a kind (``"float"``, ``"int"``, ``"bool"``), a NumPy dtype; ``None``: float."""

REFERENCES: dict[str, Callable[..., Any]] = {}
"""Primitive name -> plain-NumPy reference function."""

Reference = TypeVar("Reference", bound=Callable[..., Any])


def reference(fn: Reference) -> Reference:
    """Register ``fn`` under its own name (a trailing underscore is dropped: ``abs_`` -> ``abs``)."""
    REFERENCES[fn.__name__.rstrip("_")] = fn
    return fn


def reference_as(*names: str) -> Callable[[Reference], Reference]:
    """Register one rank-generic ``fn`` under each of ``names`` (``conv1d`` and ``conv2d`` share one)."""

    def register(fn: Reference) -> Reference:
        REFERENCES.update(dict.fromkeys(names, fn))
        return fn

    return register


_FLOAT = np.float64
_INT = np.int64


def numpy_dtype(dtype: DtypeLike) -> np.dtype:
    """NumPy dtype for a kind (``"float"`` -> float64, ``"int"`` -> int64, ``"bool"``) or an ``ml.Dtype``.

    ``bfloat16`` has no NumPy dtype; the reference uses float32 for it.
    """
    if dtype in ("float", None):
        return np.dtype(_FLOAT)
    if dtype == "int":
        return np.dtype(_INT)
    if dtype == "bool":
        return np.dtype(bool)
    parsed = Dtype.parse(dtype)
    if parsed is Dtype.bfloat16:
        return np.dtype(np.float32)
    return typing.cast(np.dtype, np.dtype(parsed.value))


def _float(x: np.ndarray) -> np.ndarray:
    """Float result of an op that promotes ints/bools to float (``divide``, ``exp``, ...)."""
    x = np.asarray(x)
    return x if x.dtype.kind == "f" else x.astype(_FLOAT)


def _axis(axis: Axis) -> int | tuple[int, ...] | None:
    return axis if axis is None or isinstance(axis, int) else tuple(axis)


def _spatial(value: int | Sequence[int], n: int) -> tuple[int, ...]:
    return (int(value),) * n if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)


# -- elementwise unary ---------------------------------------------------------------------------


def _unary(function: Callable[[Any], Any], in_float: bool = False) -> Callable[[Array], Array]:
    """The reference of a one-input primitive that is a NumPy function (of the input cast to float64 when
    ``in_float``: integer inputs of ``exp``, ``log``, ... compute in float)."""

    def run(input: Array) -> Array:
        return typing.cast(Array, function(_float(input) if in_float else input))

    run.__name__ = function.__name__
    return run


_EXACT = {"neg": np.negative, "abs": np.abs, "sign": np.sign, "floor": np.floor, "isnan": np.isnan,
          "logical_not": np.logical_not}  # fmt: skip
REFERENCES.update({name: _unary(function) for name, function in _EXACT.items()})
REFERENCES.update(
    {n: _unary(getattr(np, n), in_float=True) for n in ("exp", "log", "log1p", "sqrt", "sin", "cos", "tanh")}
)


@reference
def rsqrt(input: Array) -> Array:
    return typing.cast(Array, 1.0 / np.sqrt(_float(input)))


@reference
def square(input: Array) -> Array:
    return typing.cast(Array, input * input)


@reference
def sigmoid(input: Array) -> Array:
    with np.errstate(over="ignore"):
        return typing.cast(Array, 1.0 / (1.0 + np.exp(-_float(input))))


@reference
def relu(input: Array) -> Array:
    return typing.cast(Array, np.maximum(input, np.zeros((), dtype=np.asarray(input).dtype)))


@reference
def leaky_relu(input: Array, *, slope: float) -> Array:
    x = _float(input)
    return np.where(x > 0, x, slope * x)


_erf = np.vectorize(math.erf, otypes=[_FLOAT])


@reference
def erf(input: Array) -> Array:
    x = _float(input)
    return typing.cast(Array, _erf(x).astype(x.dtype))


@reference
def gelu(input: Array, *, approximate: bool) -> Array:
    x = _float(input)
    if approximate:
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
        return 0.5 * x * (1.0 + np.tanh(inner))
    return typing.cast(Array, 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(x.dtype)))


@reference
def softplus(input: Array) -> Array:
    return typing.cast(Array, np.logaddexp(_float(input), 0.0))


@reference
def nan_to_num(
    input: Array, *, nan: float, posinf: float | None, neginf: float | None, float_dtype: DtypeLike = None
) -> Array:
    """``None`` infinities become the largest finite values of the dtype computed in: ``float_dtype``
    (the tested dtype, given by the conformance suite) or the input's own."""
    x = np.asarray(input)
    if x.dtype.kind == "f":
        largest = finite_max(x.dtype if float_dtype is None else float_dtype)
        posinf = largest if posinf is None else posinf
        neginf = -largest if neginf is None else neginf
    return typing.cast(Array, np.nan_to_num(x, copy=True, nan=nan, posinf=posinf, neginf=neginf))


_BFLOAT16_MAX = float(np.array(0x7F7F0000, dtype=np.uint32).view(np.float32))


def finite_max(dtype: Any) -> float:
    """The largest finite value of a float dtype (NumPy dtype or ``ml.Dtype``; bfloat16 included).

    >>> finite_max("bfloat16")
    3.3895313892515355e+38
    """
    parsed = Dtype.parse(dtype)
    return _BFLOAT16_MAX if parsed is Dtype.bfloat16 else float(np.finfo(parsed.value).max)


@reference
def stop_gradient(input: Array) -> Array:
    return np.array(input, copy=True)


@reference
def cast(input: Array, *, dtype: DtypeLike) -> Array:
    return np.asarray(input).astype(numpy_dtype(dtype))


# -- elementwise binary --------------------------------------------------------------------------
def _binary(function: Callable[[Any, Any], Any]) -> Callable[[Array, Array], Array]:
    """The reference of a two-input primitive that is a NumPy function of ``(left, right)``."""

    def run(left: Array, right: Array) -> Array:
        return typing.cast(Array, function(left, right))

    run.__name__ = function.__name__
    return run


_BINARY = ("add", "subtract", "multiply", "floor_divide", "power", "minimum", "maximum", "equal", "not_equal", "less",
           "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_xor")  # fmt: skip
REFERENCES.update({name: _binary(getattr(np, name)) for name in _BINARY})


@reference
def divide(left: Array, right: Array) -> Array:
    return typing.cast(Array, np.true_divide(_float(left), right))


@reference
def where(condition: Array, left: Array, right: Array) -> Array:
    return np.where(condition, left, right)


# -- reductions ----------------------------------------------------------------------------------
@reference
def sum_(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    x = np.asarray(input)
    return typing.cast(Array, np.sum(x.astype(_INT) if x.dtype == bool else x, axis=_axis(axis), keepdims=keepdim))


@reference
def mean(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    return typing.cast(Array, np.mean(_float(input), axis=_axis(axis), keepdims=keepdim))


@reference
def max_(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    return typing.cast(Array, np.max(input, axis=_axis(axis), keepdims=keepdim))


@reference
def min_(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    return typing.cast(Array, np.min(input, axis=_axis(axis), keepdims=keepdim))


@reference
def prod(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    x = np.asarray(input)
    return typing.cast(Array, np.prod(x.astype(_INT) if x.dtype == bool else x, axis=_axis(axis), keepdims=keepdim))


@reference
def argmax(input: Array, *, axis: int | None, keepdim: bool) -> Array:
    return typing.cast(Array, np.argmax(input, axis=axis, keepdims=keepdim).astype(_INT))


@reference
def argmin(input: Array, *, axis: int | None, keepdim: bool) -> Array:
    return typing.cast(Array, np.argmin(input, axis=axis, keepdims=keepdim).astype(_INT))


@reference
def var(input: Array, *, axis: Axis, keepdim: bool, correction: float) -> Array:
    return typing.cast(Array, np.var(_float(input), axis=_axis(axis), keepdims=keepdim, ddof=correction))


@reference
def log_softmax(input: Array, *, axis: int) -> Array:
    x = _float(input)
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return typing.cast(Array, shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True)))


@reference
def softmax(input: Array, *, axis: int) -> Array:
    return typing.cast(Array, np.exp(log_softmax(input, axis=axis)))


# -- linear algebra ------------------------------------------------------------------------------
@reference
def matmul(left: Array, right: Array) -> Array:
    return typing.cast(Array, np.matmul(left, right))


@reference
def linear(input: Array, weight: Array, bias: Array | None) -> Array:
    out = np.matmul(input, np.swapaxes(weight, 0, 1))
    return typing.cast(Array, out if bias is None else out + bias)


def _symmetric(input: Array) -> Array:
    """``(A + A^T) / 2``: the references of ``cholesky``/``eigvalsh`` are functions of the symmetric part
    (what the backends read for a symmetric input), so finite differences give the symmetric gradient."""
    return typing.cast(Array, 0.5 * (input + np.swapaxes(input, -1, -2)))


@reference
def cholesky(input: Array) -> Array:
    return np.linalg.cholesky(_symmetric(input))


@reference
def eigvalsh(input: Array) -> Array:
    return np.linalg.eigvalsh(_symmetric(input))


@reference
def cholesky_grad(output_grad: Array, input: Array) -> Array:
    """Forward mode, one symmetric direction at a time: ``dL = L Phi(L^-1 dA L^-T)`` (independent of the
    reverse-mode formula the backends use); entry ``(i, j)`` is ``<tril(output_grad), dL>``."""
    factor = np.linalg.cholesky(_symmetric(input))
    inverse = np.linalg.inv(factor)
    n = input.shape[-1]
    grad = np.zeros(np.broadcast_shapes(input.shape, output_grad.shape))
    for i in range(n):
        for j in range(n):
            direction = np.zeros((n, n))
            direction[i, j] += 0.5
            direction[j, i] += 0.5
            inner = inverse @ direction @ np.swapaxes(inverse, -1, -2)
            phi = np.tril(inner, -1) + 0.5 * inner * np.eye(n)
            grad[..., i, j] = np.sum(np.tril(output_grad) * (factor @ phi), axis=(-1, -2))
    return grad


@reference
def eigvalsh_grad(output_grad: Array, input: Array) -> Array:
    _, vectors = np.linalg.eigh(_symmetric(input))
    return typing.cast(Array, np.einsum("...ik,...k,...jk->...ij", vectors, output_grad, vectors))


# -- shape manipulation --------------------------------------------------------------------------
REFERENCES.update({"at_least_1d": _unary(np.atleast_1d), "unique": _unary(np.unique)})


@reference
def item(input: Array) -> Scalar:
    return typing.cast(Scalar, np.asarray(input).item())


@reference
def to_list(*inputs: Array, n: int) -> list[Array]:
    return list(inputs)


@reference
def to_tuple(*inputs: Array, n: int) -> tuple[Array, ...]:
    return tuple(inputs)


@reference
def reshape(input: Array, *, shape: Sequence[int | None]) -> Array:
    x = np.asarray(input)
    target = [x.shape[i] if s is None else int(s) for i, s in enumerate(shape)]
    return x.reshape(target).copy()


@reference
def flatten(input: Array, *, start_dim: int, end_dim: int) -> Array:
    x = np.asarray(input)
    rank = max(x.ndim, 1)
    if not (-rank <= start_dim < rank and -rank <= end_dim < rank):
        raise ValueError(f"flatten: start_dim={start_dim}, end_dim={end_dim} out of range for rank {x.ndim}")
    start, end = start_dim % rank, end_dim % rank
    return x.reshape((*x.shape[:start], -1, *x.shape[end + 1 :])).copy()


@reference
def transpose(input: Array, *, axes: Sequence[int] | None) -> Array:
    return np.transpose(input, None if axes is None else tuple(axes)).copy()


@reference
def swapaxes(input: Array, *, axis1: int, axis2: int) -> Array:
    return np.swapaxes(input, axis1, axis2).copy()


@reference
def squeeze(input: Array, *, axis: Axis) -> Array:
    return np.squeeze(input, axis=_axis(axis)).copy()


@reference
def unsqueeze(input: Array, *, axis: int | Sequence[int]) -> Array:
    return np.expand_dims(input, axis if isinstance(axis, int) else tuple(axis)).copy()


@reference
def broadcast_to(input: Array, *, shape: Sequence[int]) -> Array:
    return np.broadcast_to(input, tuple(shape)).copy()


@reference
def concat(*inputs: Array, n: int, axis: int) -> Array:
    assert len(inputs) == n, f"concat got {len(inputs)} inputs for n={n}"
    return np.concatenate(inputs, axis=axis)


@reference
def split(input: Array, *, sections: int | Sequence[int], axis: int) -> tuple[Array, ...]:
    indices = sections if isinstance(sections, int) else list(sections)
    return tuple(part.copy() for part in np.split(input, indices, axis=axis))


@reference
def pad(input: Array, *, pad_width: Sequence[Sequence[int]], value: float) -> Array:
    return np.pad(input, [tuple(p) for p in pad_width], mode="constant", constant_values=value)


@reference
def index(input: Array, *, key: Any) -> Array:
    return np.array(np.asarray(input)[key])


@reference
def gather(input: Array, index: Array, *, axis: int) -> Array:
    return np.take_along_axis(np.asarray(input), np.asarray(index), axis=axis)


@reference
def dynamic_update_slice(input: Array, update: Array, start: Array, *, axis: int) -> Array:
    result = np.array(input, copy=True)
    first = int(np.asarray(start).reshape(-1)[0])
    moved = np.moveaxis(result, axis, 0)  # a view: writing it writes result
    moved[first : first + np.shape(update)[axis]] = np.moveaxis(np.asarray(update), axis, 0)
    return result


def _creation_dtype(dtype: DtypeLike, default: str) -> np.dtype:
    return numpy_dtype(default if dtype is None else dtype)


@reference
def reshape_to(input: Array, shape: Array, *, inferred: Any = None) -> Array:
    return reshape(input, shape=tuple(int(s) for s in np.asarray(shape).reshape(-1)))


@reference
def split_at(input: Array, sections: Array, *, axis: int, parts: int) -> tuple[Array, ...]:
    return tuple(np.split(np.asarray(input), [int(s) for s in np.asarray(sections).reshape(-1)], axis=axis))


@reference
def arange_between(start: Array, stop: Array, step: Array) -> Array:
    return arange(start=np.asarray(start).item(), stop=np.asarray(stop).item(), step=np.asarray(step).item())


@reference
def randn_of(shape: Array) -> Array:
    return randn(shape=tuple(int(s) for s in np.asarray(shape).reshape(-1)))


@reference
def cast_like(input: Array, like: Array) -> Array:
    return np.asarray(input).astype(np.asarray(like).dtype)


@reference
def arange(*, start: float, stop: float, step: float) -> Array:
    values = (start, stop, step)
    kind = "float" if any(isinstance(v, float) for v in values) else "int"
    return np.arange(start, stop, step, dtype=numpy_dtype(kind))


@reference
def ones(*, shape: Sequence[int], dtype: DtypeLike) -> Array:
    return np.ones(tuple(shape), dtype=_creation_dtype(dtype, "float"))


@reference
def zeros(*, shape: Sequence[int], dtype: DtypeLike) -> Array:
    return np.zeros(tuple(shape), dtype=_creation_dtype(dtype, "float"))


@reference
def full(*, shape: Sequence[int], fill_value: float, dtype: DtypeLike) -> Array:
    if dtype is None:
        dtype = "bool" if isinstance(fill_value, bool) else "int" if isinstance(fill_value, int) else "float"
    return np.full(tuple(shape), fill_value, dtype=numpy_dtype(dtype))


REFERENCES.update({"zeros_like": _unary(np.zeros_like), "ones_like": _unary(np.ones_like)})


@reference
def dtype_constant(input: Array, *, constant: str, float_dtype: DtypeLike = None) -> Array:
    """Mithril's constant for the dtype computed in (``float_dtype``, else the input's float dtype, else float64),
    from ``np.finfo``: the smallest normal number, and ``StableReciprocal``'s threshold, its square root (float64:
    Mithril's ``1.4916681462400413e-153``, ten times that)."""
    x = np.asarray(input)
    dtype = (
        Dtype.parse(float_dtype)
        if float_dtype is not None
        else Dtype.parse(x.dtype)
        if x.dtype.kind == "f"
        else Dtype.float64
    )
    tiny = float(np.finfo(np.float32 if dtype is Dtype.bfloat16 else dtype.value).tiny)
    if constant == "min_positive_normal":
        value = tiny
    elif constant == "stable_reciprocal_threshold":
        value = 1.4916681462400413e-153 if dtype is Dtype.float64 else math.sqrt(tiny)
    else:
        raise ValueError(f"dtype_constant: unknown constant {constant!r}")
    return np.asarray(value, dtype=np.float32 if dtype is Dtype.bfloat16 else dtype.value)


@reference
def positions(input: Array, *, axis: int) -> Array:
    return np.arange(np.shape(input)[axis], dtype=_INT)


@reference
def shape(input: Array) -> Array:
    return np.array(np.shape(input), dtype=_INT)


@reference
def size(input: Array) -> Array:
    return np.array(np.size(input), dtype=_INT)


# -- convolution ---------------------------------------------------------------------------------
def _conv_geometry(
    kernel: Sequence[int], stride: Window, padding: Padding, dilation: Window
) -> tuple[tuple[int, ...], list[tuple[int, int]], tuple[int, ...]]:
    n = len(kernel)
    stride, dilation = _spatial(stride, n), _spatial(dilation, n)
    _, pads, _ = window_attributes(tuple(kernel), stride=stride, padding=padding, dilation=dilation)
    return stride, list(pads), dilation


def _out_sizes(
    padded: Sequence[int], kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]
) -> list[int]:
    return [(p - d * (k - 1) - 1) // s + 1 for p, k, s, d in zip(padded, kernel, stride, dilation, strict=True)]


def _offset_slices(
    offset: Sequence[int], out_sizes: Sequence[int], stride: Sequence[int], dilation: Sequence[int]
) -> tuple[slice, ...]:
    """Slices of the padded input that kernel position ``offset`` sees, one per spatial axis."""
    return tuple(
        slice(o * d, o * d + s * (size - 1) + 1, s)
        for o, size, s, d in zip(offset, out_sizes, stride, dilation, strict=True)
    )


@dataclasses.dataclass(frozen=True)
class _ConvPlan:
    """A convolution's geometry: ``input`` ``[N, C, ...]`` padded by ``pads`` gives ``out_sizes`` output
    positions; :meth:`taps` walks its kernel offsets and groups."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pads: list[tuple[int, int]]
    dilation: tuple[int, ...]
    out_sizes: list[int]
    groups: int
    in_per_group: int
    out_per_group: int

    def pad(self, x: Array) -> Array:
        """``x`` zero-padded on its spatial axes."""
        return np.pad(x, [(0, 0), (0, 0), *self.pads])

    def padded_shape(self, shape: Sequence[int]) -> list[int]:
        """The shape of an ``[N, C, ...]`` array of ``shape`` once padded."""
        return [*shape[:2], *(shape[2 + i] + sum(pad) for i, pad in enumerate(self.pads))]

    def taps(self) -> Iterator[tuple[Index, Index, Index, Index]]:
        """Every (kernel offset, group) of the convolution: the padded input's view at that offset (all output
        positions at once), the group's input channels and output channels (of an ``[N, C, ...]`` array), and
        its weight taps ``w[group's outputs, :, *offset]``."""
        for offset in itertools.product(*(range(k) for k in self.kernel)):
            spatial = _offset_slices(offset, self.out_sizes, self.stride, self.dilation)
            window: Index = (slice(None), slice(None), *spatial)
            for g in range(self.groups):
                ins: Index = (slice(None), slice(g * self.in_per_group, (g + 1) * self.in_per_group))
                outs: Index = (slice(None), slice(g * self.out_per_group, (g + 1) * self.out_per_group))
                yield window, ins, outs, (outs[1], slice(None), *offset)


def _conv_plan(
    input_shape: Sequence[int],
    weight_shape: Sequence[int],
    stride: Window,
    padding: Padding,
    dilation: Window,
    groups: int,
) -> _ConvPlan:
    """The geometry of convolving an ``input_shape`` input with an ``[O, C / groups, *kernel]`` weight."""
    kernel = tuple(weight_shape[2:])
    stride, pads, dilation = _conv_geometry(kernel, stride, padding, dilation)
    padded = [input_shape[2 + i] + sum(pads[i]) for i in range(len(kernel))]
    out_sizes = _out_sizes(padded, kernel, stride, dilation)
    in_per_group, out_per_group = input_shape[1] // groups, weight_shape[0] // groups
    return _ConvPlan(kernel, stride, pads, dilation, out_sizes, groups, in_per_group, out_per_group)


@reference_as("conv1d", "conv2d")
def _conv(
    input: Array, weight: Array, bias: Array | None, *, stride: Window, padding: Padding, dilation: Window, groups: int
) -> Array:
    """out[n, o, *y] = sum_{c, *k} x_pad[n, g*Cg + c, *(y*stride + k*dilation)] * w[o, c, *k] + b[o]."""
    x, w = np.asarray(input), np.asarray(weight)
    plan = _conv_plan(x.shape, w.shape, stride, padding, dilation, groups)
    xp = plan.pad(x)
    out_channels = w.shape[0]
    out = np.zeros((x.shape[0], out_channels, *plan.out_sizes), dtype=np.result_type(x, w))
    for window, ins, outs, taps in plan.taps():
        out[outs] += np.einsum("nc...,oc->no...", xp[window][ins], w[taps])
    if bias is not None:
        out = out + np.asarray(bias).reshape(1, out_channels, *([1] * len(plan.kernel)))
    return out


@reference_as("conv1d_grad_input", "conv2d_grad_input")
def _conv_grad_input(
    output_grad: Array, weight: Array, like: Array, *, stride: Window, padding: Padding, dilation: Window, groups: int
) -> Array:
    """Transpose of :func:`_conv` in its input: scatter-add every kernel position's contribution."""
    g_out, w = np.asarray(output_grad), np.asarray(weight)
    plan = _conv_plan(like.shape, w.shape, stride, padding, dilation, groups)
    gxp = np.zeros(plan.padded_shape(like.shape), dtype=np.result_type(g_out, w))
    for window, ins, outs, taps in plan.taps():
        gxp[window][ins] += np.einsum("no...,oc->nc...", g_out[outs], w[taps])
    crop = tuple(slice(before, before + like.shape[2 + i]) for i, (before, _) in enumerate(plan.pads))
    return gxp[(slice(None), slice(None), *crop)].copy()


@reference_as("conv1d_grad_weight", "conv2d_grad_weight")
def _conv_grad_weight(
    output_grad: Array, input: Array, like: Array, *, stride: Window, padding: Padding, dilation: Window, groups: int
) -> Array:
    g_out, x = np.asarray(output_grad), np.asarray(input)
    plan = _conv_plan(x.shape, like.shape, stride, padding, dilation, groups)
    xp = plan.pad(x)
    gw = np.zeros(like.shape, dtype=np.result_type(g_out, x))
    summed = [0, *range(2, xp.ndim)]  # batch and output positions
    for window, ins, outs, taps in plan.taps():
        gw[taps] += np.tensordot(g_out[outs], xp[window][ins], axes=(summed, summed))
    return gw


@reference
def batch_norm2d(
    input: Array, weight: Array | None = None, bias: Array | None = None, *, eps: float
) -> tuple[Array, Array, Array]:
    """``nn.BatchNorm2d`` in training mode: per-channel mean and biased variance over ``(N, H, W)``."""
    mean = input.mean(axis=(0, 2, 3))
    var = input.var(axis=(0, 2, 3))
    output = (input - mean[:, None, None]) / np.sqrt(var[:, None, None] + eps)
    if weight is not None:
        output = output * weight[:, None, None]
    if bias is not None:
        output = output + bias[:, None, None]
    return output, mean, var


# -- pooling -------------------------------------------------------------------------------------
def _pool_setup(
    shape: Sequence[int], kernel_size: Window, stride: Window | None, padding: Padding, dilation: Window
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], Pads, list[int]]:
    kernel = _spatial(kernel_size, 2)
    stride = kernel if stride is None else _spatial(stride, 2)
    dilation = _spatial(dilation, 2)
    _, pads, _ = window_attributes(kernel, stride=stride, padding=padding, dilation=dilation)
    padded = [shape[-2] + sum(pads[0]), shape[-1] + sum(pads[1])]
    return kernel, stride, dilation, pads, _out_sizes(padded, kernel, stride, dilation)


def _windows(
    x: Array,
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    pads: Pads,
    out_sizes: Sequence[int],
    fill: float,
) -> Array:
    """``[..., oh, ow, kh*kw]``: every pooling window of ``x`` padded with ``fill``."""
    lead = [(0, 0)] * (x.ndim - 2)
    xp = np.pad(x, [*lead, *pads], mode="constant", constant_values=fill)
    views = []
    for offset in itertools.product(range(kernel[0]), range(kernel[1])):
        window: Index = (Ellipsis, *_offset_slices(offset, out_sizes, stride, dilation))
        views.append(xp[window])
    return np.stack(views, axis=-1)


def _scatter_windows(
    shape: Sequence[int],
    pads: Pads,
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    out_sizes: Sequence[int],
    contribution: Callable[[int], Array],
    dtype: np.dtype,
) -> Array:
    """Sum ``contribution(k) -> [..., oh, ow]`` back onto the input positions of window element ``k``."""
    padded = [*shape[:-2], shape[-2] + sum(pads[0]), shape[-1] + sum(pads[1])]
    gxp = np.zeros(padded, dtype=dtype)
    for k, offset in enumerate(itertools.product(range(kernel[0]), range(kernel[1]))):
        window: Index = (Ellipsis, *_offset_slices(offset, out_sizes, stride, dilation))
        gxp[window] += contribution(k)
    return gxp[..., pads[0][0] : pads[0][0] + shape[-2], pads[1][0] : pads[1][0] + shape[-1]].copy()


@reference
def max_pool2d(
    input: Array, *, kernel_size: Window, stride: Window | None, padding: Padding, dilation: Window
) -> Array:
    x = np.asarray(input)
    kernel, stride, dilation, pads, out_sizes = _pool_setup(x.shape, kernel_size, stride, padding, dilation)
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    return typing.cast(Array, _windows(x, kernel, stride, dilation, pads, out_sizes, fill).max(axis=-1))


def _avg_divisor(
    shape: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    pads: Pads,
    out_sizes: Sequence[int],
    count_include_pad: bool,
) -> float | Array:
    if count_include_pad:
        return float(kernel[0] * kernel[1])
    ones_ = np.ones(shape[-2:])
    return typing.cast(Array, _windows(ones_, kernel, stride, dilation, pads, out_sizes, 0.0).sum(axis=-1))


@reference
def avg_pool2d(
    input: Array,
    *,
    kernel_size: Window,
    stride: Window | None,
    padding: Padding,
    dilation: Window,
    count_include_pad: bool,
) -> Array:
    x = _float(input)
    kernel, stride, dilation, pads, out_sizes = _pool_setup(x.shape, kernel_size, stride, padding, dilation)
    total = _windows(x, kernel, stride, dilation, pads, out_sizes, 0.0).sum(axis=-1)
    return typing.cast(
        Array, total / _avg_divisor(x.shape, kernel, stride, dilation, pads, out_sizes, count_include_pad)
    )


@reference
def max_pool2d_grad(
    output_grad: Array, input: Array, *, kernel_size: Window, stride: Window | None, padding: Padding, dilation: Window
) -> Array:
    x, g = np.asarray(input), np.asarray(output_grad)
    kernel, stride, dilation, pads, out_sizes = _pool_setup(x.shape, kernel_size, stride, padding, dilation)
    winner = _windows(x, kernel, stride, dilation, pads, out_sizes, -np.inf).argmax(axis=-1)  # first on ties
    return _scatter_windows(x.shape, pads, kernel, stride, dilation, out_sizes, lambda k: g * (winner == k), g.dtype)


@reference
def avg_pool2d_grad(
    output_grad: Array,
    input: Array,
    *,
    kernel_size: Window,
    stride: Window | None,
    padding: Padding,
    dilation: Window,
    count_include_pad: bool,
) -> Array:
    x, g = np.asarray(input), np.asarray(output_grad)
    kernel, stride, dilation, pads, out_sizes = _pool_setup(x.shape, kernel_size, stride, padding, dilation)
    share = g / _avg_divisor(x.shape, kernel, stride, dilation, pads, out_sizes, count_include_pad)
    return _scatter_windows(x.shape, pads, kernel, stride, dilation, out_sizes, lambda k: share, g.dtype)


# -- embedding, attention, dropout, sampling -----------------------------------------------------
@reference
def embedding(input: Array, weight: Array) -> Array:
    return typing.cast(Array, np.asarray(weight)[np.asarray(input)])


@reference
def embedding_grad(output_grad: Array, input: Array, like: Array) -> Array:
    grad = np.zeros(np.shape(like), dtype=np.asarray(output_grad).dtype)
    np.add.at(grad, np.asarray(input), output_grad)
    return grad


@reference
def attention_weights(query: Array, key: Array, mask: Array | None, *, causal: bool, scale: float | None) -> Array:
    q, k = _float(query), _float(key)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    logits = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if mask is not None:
        mask = np.asarray(mask)
        logits = np.where(mask, logits, -np.inf) if mask.dtype == bool else logits + mask
    if causal:
        lq, lk = logits.shape[-2:]
        keep = np.arange(lk)[None, :] <= np.arange(lq)[:, None]  # j <= i (top-left aligned, as torch)
        logits = np.where(keep, logits, -np.inf)
    return softmax(logits, axis=-1)


@reference
def scaled_dot_product_attention(
    query: Array, key: Array, value: Array, mask: Array | None, *, causal: bool, scale: float | None
) -> Array:
    return typing.cast(Array, np.matmul(attention_weights(query, key, mask, causal=causal, scale=scale), value))


_RNG = np.random.default_rng(0)


@reference
def dropout_mask(input: Array, *, p: float, training: bool) -> Array:
    shape_ = np.shape(input)
    if not training or p == 0:
        return np.ones(shape_)
    return (_RNG.random(shape_) >= p) / (1.0 - p)


@reference
def randn(*, shape: Sequence[int]) -> Array:
    return _RNG.standard_normal(tuple(shape))


@reference
def randint(*, low: int, high: int, shape: Sequence[int]) -> Array:
    return _RNG.integers(low, high, tuple(shape), dtype=_INT)


# -- losses --------------------------------------------------------------------------------------
def _ce_log_probs(x: Array, input_type: str, eps: float) -> Array:
    if input_type == "logits":
        return log_softmax(x, axis=1)
    if input_type == "probs":
        return typing.cast(Array, np.log(np.maximum(x, eps)))
    if input_type == "log_probs":
        return x
    raise ValueError(f"cross_entropy: input_type must be 'logits', 'probs' or 'log_probs', got {input_type!r}")


def _ce_target(x: Array, target: Array, categorical: bool) -> Array:
    """Targets as probabilities shaped like the input ``[N, C, *rest]`` (one-hot for class indices)."""
    if not categorical:
        return _float(target)
    classes = np.arange(x.shape[1]).reshape(1, -1, *([1] * (x.ndim - 2)))
    return typing.cast(Array, (np.expand_dims(np.asarray(target), 1) == classes).astype(x.dtype))


@reference
def cross_entropy(input: Array, target: Array, *, input_type: str, categorical: bool, eps: float) -> Array:
    x = _float(input)
    return typing.cast(Array, -np.sum(_ce_target(x, target, categorical) * _ce_log_probs(x, input_type, eps), axis=1))


@reference
def cross_entropy_grad(
    output_grad: Array, input: Array, target: Array, *, input_type: str, categorical: bool, eps: float
) -> Array:
    x = _float(input)
    t = _ce_target(x, target, categorical)
    if input_type == "logits":
        local = softmax(x, axis=1) * np.sum(t, axis=1, keepdims=True) - t
    elif input_type == "probs":
        local = np.where(x > eps, -t / np.maximum(x, eps), 0.0)
    else:
        local = -t
    return typing.cast(Array, local * np.expand_dims(np.asarray(output_grad), 1))


@reference
def lstm_recurrence(
    input: Array, weight_hh: Array, initial_hidden: Array, initial_cell: Array
) -> tuple[Array, Array, Array]:
    """The textbook LSTM loop, step by step (real or complex inputs: the helper's reference below
    differentiates it by complex steps)."""
    n = initial_hidden.shape[-1]
    h, c, hiddens = initial_hidden, initial_cell, []
    for t in range(input.shape[1]):
        z = input[:, t] + h @ weight_hh.T
        i, f, g, o = (z[:, k * n : (k + 1) * n] for k in range(4))
        c = c / (1 + np.exp(-f)) + np.tanh(g) / (1 + np.exp(-i))
        h = np.tanh(c) / (1 + np.exp(-o))
        hiddens.append(h)
    return np.stack(hiddens, axis=1), h, c


@reference
def adam_update(
    param: Array,
    grad: Array,
    m: Array,
    v: Array,
    step_size: Array,
    eps_hat: Array,
    shrink: Array | None = None,
    *,
    beta1: float = 0.9,
    beta2: float = 0.999,
    l2: float = 0.0,
    in_place: bool = False,
) -> tuple[Array, Array, Array]:
    """Adam as ``torch.optim`` writes it, the bias corrections recovered from the step's scalars:
    ``eps_hat = eps * sqrt(c2)`` and ``step_size = lr * sqrt(c2) / c1`` for the corrections ``c1``, ``c2``
    (``in_place`` only allows writing the inputs: the results are the same)."""
    grad = grad + l2 * param
    param = param if shrink is None else param * shrink
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad**2
    return param - step_size * m / (np.sqrt(v) + eps_hat), m, v


@reference
def polynomial_features(input: Array, *, degree: int) -> Array:
    """scikit-learn's column order (no bias column): every product of ``1..degree`` columns, chosen with
    replacement, in lexicographic order."""
    import itertools

    columns = range(input.shape[1])
    terms = [c for d in range(1, degree + 1) for c in itertools.combinations_with_replacement(columns, d)]
    return np.stack([np.prod(input[:, list(t)], axis=1) for t in terms], axis=1)


@reference
def lstm_layer(
    input: Array,
    weight_ih: Array,
    weight_hh: Array,
    bias_ih: Array,
    bias_hh: Array,
    initial_hidden: Array,
    initial_cell: Array,
) -> tuple[Array, Array, Array]:
    """The input projection, then the textbook loop."""
    return lstm_recurrence(input @ weight_ih.T + bias_ih + bias_hh, weight_hh, initial_hidden, initial_cell)


@reference
def lstm_recurrence_grad(
    output_grad: Array,
    hidden_grad: Array,
    cell_grad: Array,
    input: Array,
    weight_hh: Array,
    initial_hidden: Array,
    initial_cell: Array,
    output: Array,
) -> tuple[Array, ...]:
    """Complex-step derivatives of ``<cotangents, lstm_recurrence(...)>`` with respect to every entry of
    every input (exact to rounding; independent of the backends' backpropagation through time)."""
    primals = [np.asarray(a, dtype=complex) for a in (input, weight_hh, initial_hidden, initial_cell)]
    cotangents = (output_grad, hidden_grad, cell_grad)
    step = 1e-30
    grads = []
    for k, primal in enumerate(primals):
        grad = np.zeros(primal.shape)
        for idx in np.ndindex(*primal.shape):
            moved = [p.copy() for p in primals]
            moved[k][idx] += 1j * step
            outs = lstm_recurrence(*moved)
            grad[idx] = sum(np.sum(o.imag * g) for o, g in zip(outs, cotangents, strict=True)) / step
        grads.append(grad)
    return tuple(grads)


@reference
def binary_cross_entropy(input: Array, target: Array, *, input_type: str, eps: float) -> Array:
    x, t = _float(input), _float(target)
    if input_type == "logits":  # log(1 + e^x) - t x, written without overflow
        return typing.cast(Array, np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x))))
    if input_type == "probs":
        return typing.cast(Array, -(t * np.log(np.maximum(x, eps)) + (1 - t) * np.log(np.maximum(1 - x, eps))))
    raise ValueError(f"binary_cross_entropy: input_type must be 'logits' or 'probs', got {input_type!r}")


@reference
def squared_error(input: Array, target: Array) -> Array:
    diff = _float(input) - target
    return typing.cast(Array, diff * diff)


@reference
def absolute_error(input: Array, target: Array) -> Array:
    return typing.cast(Array, np.abs(_float(input) - target))


# -- user functions ------------------------------------------------------------------------------
@reference
def lambda_(input: Array, *, fn: Callable[[Array], Any], same_shape: bool) -> Array:
    return np.asarray(fn(input))


# -- gradient helpers ----------------------------------------------------------------------------
@reference
def sum_to_like(input: Array, like: Array) -> Array:
    x, target = np.asarray(input), np.shape(like)
    x = np.sum(x, axis=tuple(range(x.ndim - len(target))))
    axes = tuple(i for i, size_ in enumerate(target) if size_ == 1 and x.shape[i] != 1)
    return typing.cast(Array, np.sum(x, axis=axes, keepdims=True) if axes else x.copy())


@reference
def reshape_like(input: Array, like: Array) -> Array:
    return np.reshape(input, np.shape(like)).copy()


@reference
def broadcast_to_like(input: Array, like: Array) -> Array:
    return np.broadcast_to(input, np.shape(like)).copy()


@reference
def linear_grad_weight(output_grad: Array, input: Array) -> Array:
    g, x = np.asarray(output_grad), np.asarray(input)
    return typing.cast(Array, g.reshape(-1, g.shape[-1]).T @ x.reshape(-1, x.shape[-1]))


@reference
def index_grad(output_grad: Array, like: Array, *, key: Any) -> Array:
    grad = np.zeros(np.shape(like), dtype=np.asarray(output_grad).dtype)
    grad[key] += output_grad  # basic indexing never repeats an element
    return grad


@reference
def gather_grad(output_grad: Array, index: Array, like: Array, *, axis: int) -> Array:
    idx = np.asarray(index)
    grad = np.zeros(np.shape(like), dtype=np.asarray(output_grad).dtype)
    positions: list[Array] = list(np.indices(idx.shape, sparse=True))
    positions[axis] = idx
    np.add.at(grad, tuple(positions), output_grad)
    return grad


def _matmul_promoted(output_grad: Array, left: Array, right: Array) -> tuple[Array, Array, Array]:
    """Operands and cotangent with NumPy matmul's 1-D promotions made explicit."""
    g, a, b = np.asarray(output_grad), np.asarray(left), np.asarray(right)
    if b.ndim == 1:
        b, g = b[:, None], g[..., None]
    if a.ndim == 1:
        a, g = a[None, :], g[..., None, :]
    return g, a, b


def _summed_back(grad: Array, shape: Sequence[int]) -> Array:
    """Sum the broadcast axes of ``grad`` (leading extras, and where ``shape`` has size 1) away."""
    grad = grad.sum(axis=tuple(range(grad.ndim - len(shape))))
    return typing.cast(Array, grad.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True))


@reference
def matmul_grad_left(output_grad: Array, left: Array, right: Array) -> Array:
    g, a, b = _matmul_promoted(output_grad, left, right)
    return _summed_back(np.einsum("...mn,...kn->...mk", g, b), a.shape).reshape(np.shape(left))


@reference
def matmul_grad_right(output_grad: Array, left: Array, right: Array) -> Array:
    g, a, b = _matmul_promoted(output_grad, left, right)
    return _summed_back(np.einsum("...mk,...mn->...kn", a, g), b.shape).reshape(np.shape(right))
