"""Sliding-window geometry of convolution and pooling, shared by every backend.

One place normalises ``stride``/``padding``/``dilation`` (through :func:`~mithril.primitives.catalogue.nn.conv_geometry`),
computes output sizes (through :func:`~mithril.primitives.rules.conv_output_size`) and yields the
strided slice each kernel offset reads. Backends keep only what touches their arrays (padding,
strided views, scatter-adds). Spatial axes are always the trailing ``n`` axes of an array.

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ShapeError
from ..shapes import ShapeMismatch
from .catalogue.nn import conv_geometry, spatial
from .rules import conv_output_size

__all__ = ["WindowGeometry", "window_attributes", "check_groups", "check_pool2d_input"]

Pads = tuple[tuple[int, int], ...]


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
            out = tuple(conv_output_size(s, k, t, b + a, d) for s, k, t, (b, a), d in zip(size, kernel, st, pads, dil))
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
        return tuple(s + b + a for s, (b, a) in zip(self.size, self.pads))

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
                    for o, d, t, m in zip(offset, self.dilation, self.stride, self.out)
                ),
            )
