"""Window arguments of the convolution and pooling emitters (the geometry itself is core's)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mithril.extend import WindowGeometry


def geometry2d(attrs: Mapping[str, Any], kernel: Sequence[int], size: Sequence[int]) -> dict[str, int]:
    """The runtime's 2-d window arguments from core's :class:`~mithril.extend.WindowGeometry`
    (a 1-d window is lifted to height 1)."""
    stride, padding, dilation = attrs.get("stride"), attrs.get("padding", 0), attrs.get("dilation", 1)
    g = WindowGeometry.of(kernel, stride=stride, padding=padding, dilation=dilation, size=size)
    one_d = len(g.kernel) == 1

    def lift(v: Sequence[int], fill: int = 1) -> tuple[int, ...]:
        return (fill, *v) if one_d else tuple(v)

    (kh, kw), (sh, sw), (dh, dw), (H, W), (OH, OW) = map(lift, (g.kernel, g.stride, g.dilation, g.size, g.out))
    ph, pw = lift(g.low, 0)
    return dict(kh=kh, kw=kw, sh=sh, sw=sw, ph=ph, pw=pw, dh=dh, dw=dw, H=H, W=W, OH=OH, OW=OW)


def geometry_args(g: Mapping[str, int]) -> str:
    return ", ".join(str(g[k]) for k in ("H", "W", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw", "OH", "OW"))
