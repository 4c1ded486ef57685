"""Sliding-window geometry of convolution and pooling, shared by every backend.

The one place that normalises ``stride``/``padding``/``dilation`` (:func:`conv_geometry`), computes output
sizes (:func:`conv_output_size`) and yields the strided slice each kernel offset reads. The shape rules of
conv/pool, the Python backends, the C emitters and the GGML builder all read it; backends keep only what
touches their arrays (padding, strided views, scatter-adds). Spatial axes are always the trailing ``n`` axes.

Example:
    >>> g = WindowGeometry.of((3, 3), stride=1, padding=1, dilation=1, size=(5, 5))
    >>> g.out, g.pads, g.padded
    ((5, 5), ((1, 1), (1, 1)), True)
    >>> next(g.offset_slices())
    ((0, 0), (slice(0, 5, 1), slice(0, 5, 1)))
    >>> WindowGeometry.pool2d((8, 4, 4), kernel_size=2, stride=None, padding=0, dilation=1).out
    (2, 2)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ShapeError
from ..shapes import ShapeMismatch

__all__ = [
    "WindowGeometry", "check_groups", "check_pool2d_input", "conv_geometry", "conv_output_size", "conv_padding",
    "spatial", "window_attributes",
]  # fmt: skip

Pads = tuple[tuple[int, int], ...]


def spatial(value: Any, n: int) -> tuple[int, ...]:
    """``3`` -> ``(3,) * n``; a sequence of length ``n`` is returned as a tuple of ints."""
    if isinstance(value, int):
        return (value,) * n
    values = tuple(int(v) for v in value)
    if len(values) != n:
        raise ShapeMismatch(f"expected {n} values, got {value!r}")
    return values


def conv_geometry(
    attrs: Mapping[str, Any], kernel: tuple[int, ...]
) -> tuple[tuple[int, ...], list[tuple[int, int]], tuple[int, ...]]:
    """``(stride, [(pad_before, pad_after)], dilation)`` for a conv/pool with the given kernel sizes."""
    n = len(kernel)
    stride_attr = attrs.get("stride")
    stride = spatial(kernel if stride_attr is None else stride_attr, n)
    dilation = spatial(attrs.get("dilation", 1), n)
    return stride, conv_padding(attrs.get("padding", 0), kernel, dilation, stride), dilation


def conv_output_size(size: int, kernel: int, stride: int, pad_total: int, dilation: int) -> int:
    """Spatial output size of a convolution or pooling window."""
    span = dilation * (kernel - 1) + 1
    out = (size + pad_total - span) // stride + 1
    if out <= 0:
        raise ShapeMismatch(
            f"window of {span} (kernel {kernel}, dilation {dilation}) does not fit size {size} with padding {pad_total}"
        )
    return out


def conv_padding(
    padding: Any, kernel: Sequence[int], dilation: Sequence[int], stride: Sequence[int]
) -> list[tuple[int, int]]:
    """Normalise a padding spec to ``[(before, after)]`` per spatial axis.

    Accepts an int, a per-axis int, per-axis ``(before, after)``, ``"valid"`` or ``"same"`` (stride 1 only,
    extra padding after, as PyTorch does).
    """
    n = len(kernel)
    if padding == "valid":
        return [(0, 0)] * n
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ShapeMismatch("padding='same' needs stride 1 (as in PyTorch)")
        result = []
        for k, d in zip(kernel, dilation, strict=True):
            total = d * (k - 1)
            result.append((total // 2, total - total // 2))
        return result
    if isinstance(padding, int):
        return [(padding, padding)] * n
    items = list(padding)
    if len(items) != n:
        raise ShapeMismatch(f"padding {padding!r} needs {n} entries")
    return [(p, p) if isinstance(p, int) else (int(p[0]), int(p[1])) for p in items]


def window_attributes(
    kernel: Sequence[int], *, stride: Any, padding: Any, dilation: Any
) -> tuple[tuple[int, ...], Pads, tuple[int, ...]]:
    """``(stride, ((before, after), ...), dilation)`` as int tuples (``stride=None`` -> the kernel size).

    >>> window_attributes((2, 2), stride=None, padding=((1, 0), 1), dilation=1)
    ((2, 2), ((1, 0), (1, 1)), (1, 1))
    """
    kernel = tuple(int(k) for k in kernel)
    st, pads, dil = conv_geometry({"stride": stride, "padding": padding, "dilation": dilation}, kernel)
    return tuple(st), tuple((int(b), int(a)) for b, a in pads), tuple(dil)


def check_groups(channels: int, out_channels: int, groups: int) -> None:
    """:class:`~mithril.errors.ShapeError` (a ``ValueError``) unless both channel counts of a grouped
    convolution divide by ``groups``."""
    if channels % groups or out_channels % groups:
        raise ShapeError(
            f"conv: {channels} input / {out_channels} output channels are not divisible by groups={groups}"
        )


def check_pool2d_input(shape: Sequence[int]) -> None:
    """:class:`~mithril.errors.ShapeError` unless an input of ``shape`` has the two trailing axes a 2-d pool
    slides over."""
    if len(shape) < 2:
        raise ShapeError(f"pool2d needs an input with at least 2 axes, got shape {tuple(shape)}")


@dataclass(frozen=True)
class WindowGeometry:
    """Kernel, stride, ``[(before, after)]`` padding, dilation and the input/output spatial sizes."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pads: Pads
    dilation: tuple[int, ...]
    size: tuple[int, ...]
    out: tuple[int, ...]

    @classmethod
    def of(
        cls, kernel: Sequence[int], *, stride: Any, padding: Any, dilation: Any, size: Sequence[int]
    ) -> WindowGeometry:
        """Normalise the attributes (``stride=None`` -> kernel size) for an input of spatial ``size``.

        :class:`~mithril.errors.ShapeError` when a (dilated) window does not fit the padded input.
        """
        kernel = tuple(int(k) for k in kernel)
        st, pads, dil = window_attributes(kernel, stride=stride, padding=padding, dilation=dilation)
        size = tuple(int(s) for s in size)
        try:
            out = tuple(
                conv_output_size(s, k, t, b + a, d)
                for s, k, t, (b, a), d in zip(size, kernel, st, pads, dil, strict=True)
            )
        except ShapeMismatch:
            raise ShapeError(
                f"window {kernel} (dilation {dil}) does not fit the padded input {size} {list(pads)}"
            ) from None
        return cls(kernel, st, pads, dil, size, out)

    @classmethod
    def pool2d(
        cls, shape: Sequence[int], *, kernel_size: Any, stride: Any, padding: Any, dilation: Any
    ) -> WindowGeometry:
        """The geometry of a 2-d pool over the last two axes of an input of ``shape``."""
        check_pool2d_input(shape)
        return cls.of(spatial(kernel_size, 2), stride=stride, padding=padding, dilation=dilation, size=shape[-2:])

    @property
    def padded(self) -> bool:
        return any(b or a for b, a in self.pads)

    @property
    def padded_size(self) -> tuple[int, ...]:
        """The spatial size of the padded input."""
        return tuple(s + b + a for s, (b, a) in zip(self.size, self.pads, strict=True))

    @property
    def pointwise(self) -> bool:
        """A 1x1 kernel with stride 1 and no padding: the convolution is a plain matmul."""
        return not self.padded and all(k == 1 for k in self.kernel) and all(s == 1 for s in self.stride)

    @property
    def low(self) -> list[int]:
        """The padding before each spatial axis."""
        return [b for b, _ in self.pads]

    @property
    def high(self) -> list[int]:
        """The padding after each spatial axis."""
        return [a for _, a in self.pads]

    def offset_slices(self) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...]]]:
        """For each kernel offset (row-major), the slices of the padded input it reads for all outputs."""
        for offset in itertools.product(*(range(k) for k in self.kernel)):
            yield (
                offset,
                tuple(
                    slice(o * d, o * d + t * (m - 1) + 1, t)
                    for o, d, t, m in zip(offset, self.dilation, self.stride, self.out, strict=True)
                ),
            )
