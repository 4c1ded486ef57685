"""N-d grouped convolution with PyTorch semantics (NC..., weight ``[O, C/groups, *k]``) on top of
``mx.conv_general``, which works channels-last: inputs go to ``[N, *S, C]`` and weights to
``[O, *k, C/groups]`` inside the op.
Gradients are ``mx.vjp`` of the forward.

Example:
    >>> x, w = mx.ones((1, 2, 4, 4)), mx.ones((3, 2, 3, 3))
    >>> conv_forward(x, w, None, stride=1, padding=1, dilation=1, groups=1)[0, 0, 1, 1].item()
    18.0
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mithril.extend import WindowGeometry, check_groups

__all__ = ["conv_forward"]


def conv_forward(
    x: mx.array, weight: mx.array, bias: mx.array | None, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> mx.array:
    """``torch.nn.functional.conv{n}d(x, weight, bias, stride, padding, dilation, groups)``."""
    n = weight.ndim - 2
    out_channels = weight.shape[0]
    check_groups(x.shape[1], out_channels, groups)
    geometry = WindowGeometry.of(weight.shape[2:], stride=stride, padding=padding, dilation=dilation, size=x.shape[2:])
    out = mx.conv_general(
        mx.moveaxis(x, 1, -1),  # [N, C, *S] -> [N, *S, C]
        mx.moveaxis(weight, 1, -1),  # [O, C/g, *k] -> [O, *k, C/g]
        stride=list(geometry.stride),
        padding=(geometry.low, geometry.high),
        kernel_dilation=list(geometry.dilation),
        groups=groups,
    )
    out = mx.moveaxis(out, -1, 1)  # [N, *out, O] -> [N, O, *out]
    if bias is not None:
        out = out + mx.reshape(bias, (out_channels, *(1,) * n))
    return out

