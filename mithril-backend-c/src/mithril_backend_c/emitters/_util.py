"""Shared geometry for convolution and pooling emitters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mithril.primitives.catalogue.nn import conv_geometry


def geometry2d(attrs: Mapping[str, Any], kernel: Sequence[int], size: Sequence[int]) -> dict[str, int]:
    """Normalised 2-d window geometry (a 1-d one is lifted to height 1)."""
    kernel = tuple(int(k) for k in kernel)
    stride, pads, dilation = conv_geometry(attrs, kernel)
    out = [(s + b + a - d * (k - 1) - 1) // t + 1 for s, (b, a), d, k, t in zip(size, pads, dilation, kernel, stride)]
    if len(kernel) == 1:
        return dict(
            kh=1,
            kw=kernel[0],
            sh=1,
            sw=stride[0],
            ph=0,
            pw=pads[0][0],
            dh=1,
            dw=dilation[0],
            H=1,
            W=size[0],
            OH=1,
            OW=out[0],
        )
    return dict(
        kh=kernel[0], kw=kernel[1], sh=stride[0], sw=stride[1], ph=pads[0][0], pw=pads[1][0],
        dh=dilation[0], dw=dilation[1], H=size[0], W=size[1], OH=out[0], OW=out[1],
    )  # fmt: skip


def geometry_args(g: Mapping[str, int]) -> str:
    return ", ".join(str(g[k]) for k in ("H", "W", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw", "OH", "OW"))
