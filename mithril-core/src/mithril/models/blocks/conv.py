"""Convolution and pooling blocks (NCHW, PyTorch weight layout ``[out, in/groups, kh, kw]``)."""

from __future__ import annotations

from typing import Any

from ... import initializers, validation
from ...errors import ArgumentError
from ...framework.keys import IOKey
from ...framework.model import Model
from ..primitive import Primitive
from ._util import param

__all__ = ["AvgPool2D", "Conv1d", "Conv2d", "Flatten", "MaxPool2D"]


class _ConvNd(Model):
    _rank = 2

    def __init__(
        self,
        out_channels: int | None = None,
        kernel_size: int | tuple[int, ...] = 3,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
        use_bias: bool = True,
        *,
        in_channels: int | None = None,
        filters: int | None = None,
        weight_init: str | None = None,
        bias_init: str | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        owner = type(self).__name__
        if filters is not None:  # Keras spelling, accepted as an alias
            if out_channels is not None and out_channels != filters:
                raise ArgumentError(
                    f"{owner}: out_channels={out_channels!r} and filters={filters!r} disagree; give one of them"
                )
            out_channels = filters
        out_channels = validation.positive_int(owner, "out_channels", out_channels, optional=True)
        in_channels = validation.positive_int(owner, "in_channels", in_channels, optional=True)
        groups = validation.positive_int(owner, "groups", groups)
        kernel_size = validation.int_or_ints(
            owner,
            "kernel_size",
            kernel_size,
            minimum=1,
            count=self._rank if isinstance(kernel_size, (tuple, list)) else None,
        )
        kernel = tuple(kernel_size) if isinstance(kernel_size, (tuple, list)) else (kernel_size,) * self._rank
        if len(kernel) != self._rank:
            raise ArgumentError(
                f"{owner}: kernel_size must be a positive int or a tuple of {self._rank} of them, got {kernel_size!r}"
            )
        stride = validation.int_or_ints(owner, "stride", stride, minimum=1)
        dilation = validation.int_or_ints(owner, "dilation", dilation, minimum=1)
        padding = validation.padding(owner, "padding", padding)
        if (
            self._rank == 1
            and isinstance(padding, (tuple, list))
            and len(padding) == 2
            and all(isinstance(p, int) for p in padding)
        ):
            padding = (tuple(padding),)  # Conv1d(padding=(left, right)), as in Mithril's published API
        use_bias = validation.boolean(owner, "use_bias", use_bias)
        if in_channels is not None and in_channels % groups:
            raise ArgumentError(f"{owner}: in_channels={in_channels} must be divisible by groups={groups}")
        if out_channels is not None and out_channels % groups:
            raise ArgumentError(f"{owner}: out_channels={out_channels} must be divisible by groups={groups}")
        weight_in = in_channels // groups if in_channels is not None else None
        conv = Primitive(f"conv{self._rank}d", stride=stride, padding=padding, dilation=dilation, groups=groups)
        self |= conv(
            input=IOKey("input", shape=["N", in_channels, *([None] * self._rank)]),
            weight=param(
                "weight",
                shape=[out_channels, weight_in, *kernel],
                init=initializers.check(f"{owner}(weight_init=...)", weight_init) or "fan_in",
            ),
            bias=param(
                "bias", shape=[out_channels], init=initializers.check(f"{owner}(bias_init=...)", bias_init) or "fan_in"
            )
            if use_bias
            else None,
            output=IOKey("output"),
        )


class Conv2d(_ConvNd):
    """2-D convolution. ``Conv2d(out_channels=16, kernel_size=3, padding="same")``.

    Args: out_channels (alias ``filters``), kernel_size, stride, padding (int, pair,
    ``((top, bottom), (left, right))``, ``"valid"`` or ``"same"``), dilation, groups, use_bias,
    in_channels (optional; inferred from the input).
    """

    _rank = 2


class Conv1d(_ConvNd):
    """1-D convolution over ``[N, C, L]``; same arguments as :class:`Conv2d`, and ``padding=(left, right)``
    pads the two ends by different amounts."""

    _rank = 1


class Convolution2D(Conv2d):
    """Mithril's ``Convolution2D``: :class:`Conv2d` with Mithril's argument order, the kernel size first
    (``Convolution2D(3, 16, 2, 1)`` is ``Conv2d(16, kernel_size=3, stride=2, padding=1)``).

    >>> Convolution2D(3, 16).input_keys[:1]
    ['input']
    """

    def __init__(self, kernel_size: Any = None, out_channels: int | None = None, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, use_bias: bool = True, *, name: str | None = None,
                 **kwargs: Any) -> None:  # fmt: skip
        if kernel_size is None:
            raise ArgumentError(f"{type(self).__name__}: give kernel_size (its first argument)")
        super().__init__(out_channels, kernel_size, stride, padding, dilation, groups, use_bias, name=name, **kwargs)


class Convolution1D(Conv1d):
    """Mithril's ``Convolution1D``: :class:`Conv1d` with Mithril's argument order (kernel size, out channels,
    stride, padding, dilation, use_bias).

    >>> Convolution1D(3, 8).input_keys[:1]
    ['input']
    """

    def __init__(self, kernel_size: Any = None, out_channels: int | None = None, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, use_bias: bool = True, *, name: str | None = None,
                 **kwargs: Any) -> None:  # fmt: skip
        if kernel_size is None:
            raise ArgumentError(f"{type(self).__name__}: give kernel_size (its first argument)")
        super().__init__(out_channels, kernel_size, stride, padding, dilation, use_bias=use_bias, name=name, **kwargs)


class _Pool(Model):
    _primitive = ""

    def __init__(
        self,
        kernel_size: int | tuple[int, int],
        stride: Any = None,
        padding: Any = 0,
        dilation: int = 1,
        *,
        name: str | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(name=name)
        owner = type(self).__name__
        kernel_size = validation.int_or_ints(
            owner, "kernel_size", kernel_size, minimum=1, count=2 if isinstance(kernel_size, (tuple, list)) else None
        )
        stride = (
            None
            if stride is None
            else validation.int_or_ints(
                owner, "stride", stride, minimum=1, count=2 if isinstance(stride, (tuple, list)) else None
            )
        )
        padding = validation.padding(owner, "padding", padding)
        dilation = validation.int_or_ints(owner, "dilation", dilation, minimum=1)
        self |= Primitive(
            self._primitive, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, **extra
        )(input=IOKey("input"), output=IOKey("output"))


class MaxPool2D(_Pool):
    """Max pooling over the last two axes; ``stride`` defaults to ``kernel_size`` (PyTorch)."""

    _primitive = "max_pool2d"


class AvgPool2D(_Pool):
    """Average pooling over the last two axes; padding counts as zeros (``count_include_pad=True``)."""

    _primitive = "avg_pool2d"

    def __init__(
        self,
        kernel_size: int | tuple[int, int],
        stride: Any = None,
        padding: Any = 0,
        *,
        count_include_pad: bool = True,
        name: str | None = None,
    ) -> None:
        super().__init__(kernel_size, stride, padding, name=name, count_include_pad=count_include_pad)


class Flatten(Model):
    """Merge axes ``start_dim..end_dim`` (default: all but the batch axis)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1, *, name: str | None = None) -> None:
        super().__init__(name=name)
        start_dim = validation.axis("Flatten", "start_dim", start_dim, optional=False, multiple=False)
        end_dim = validation.axis("Flatten", "end_dim", end_dim, optional=False, multiple=False)
        self |= Primitive("flatten", start_dim=start_dim, end_dim=end_dim)(input=IOKey("input"), output=IOKey("output"))

