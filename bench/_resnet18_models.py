"""Hand-written ResNet-18s (torchvision's architecture, inference mode) for ``bench/resnet18.py``, taking
the parameter dict of ``mithril_models.resnet18`` compiled with ``use_short_namings=False`` (torchvision's
module paths: ``layer1.0.conv1.weight``, ``bn1.running_mean``, ...):

- :func:`torch_resnet18`: a PyTorch eager ``nn.Module`` with the same weights (``mithril_models.testing``'s
  torchvision-named ResNet, the reference of the model tests too);
- :func:`jax_resnet18`: a ``jax.jit`` function over the same parameter dict.
"""

from __future__ import annotations

from typing import Any

import numpy as np

STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))  # (channels, stride of the first block) per stage
BLOCKS_PER_STAGE = 2
EPS = 1e-5


def random_params(keys: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, np.ndarray]:
    """He-initialised conv/linear weights and non-trivial BatchNorm statistics (so BN is really tested)."""
    rng = np.random.default_rng(seed)
    params = {}
    for key, shape in sorted(keys.items()):
        if key.endswith("running_var"):
            value = rng.uniform(0.5, 2.0, shape)
        elif key.endswith("running_mean") or key.endswith(".bias"):
            value = rng.normal(0.0, 0.1, shape)
        elif len(shape) == 1:  # BatchNorm weight
            value = rng.uniform(0.5, 1.5, shape)
        else:
            fan_in = int(np.prod(shape[1:]))
            value = rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)
        params[key] = value.astype(np.float32)
    return params


def torch_resnet18(params: dict[str, np.ndarray]) -> Any:
    """A hand-written PyTorch eager ResNet-18 (``eval()``) holding ``params``."""
    import torch
    from mithril_models.testing import torch_resnet

    net = torch_resnet(num_classes=params["fc.weight"].shape[0])
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in params.items()}
    missing, unexpected = net.load_state_dict(state, strict=False)
    if unexpected or any(not k.endswith("num_batches_tracked") for k in missing):
        raise KeyError(f"parameter names differ from torch's: missing {missing}, unexpected {unexpected}")
    return net.eval()


def jax_resnet18(params: dict[str, np.ndarray]) -> tuple[Any, dict[str, Any]]:
    """A hand-written ``jax.jit`` ResNet-18: ``(fn, device params)`` with ``fn(params, x) -> logits``."""
    import jax
    import jax.numpy as jnp

    def conv(x: Any, w: Any, stride: int, pad: int) -> Any:
        return jax.lax.conv_general_dilated(
            x, w, (stride, stride), [(pad, pad), (pad, pad)], dimension_numbers=("NCHW", "OIHW", "NCHW")
        )

    def bn(p: dict[str, Any], x: Any, name: str) -> Any:
        scale = p[f"{name}.weight"] * jax.lax.rsqrt(p[f"{name}.running_var"] + EPS)
        shift = p[f"{name}.bias"] - p[f"{name}.running_mean"] * scale
        return x * scale[:, None, None] + shift[:, None, None]

    def block(p: dict[str, Any], x: Any, name: str, stride: int, downsample: bool) -> Any:
        out = jax.nn.relu(bn(p, conv(x, p[f"{name}.conv1.weight"], stride, 1), f"{name}.bn1"))
        out = bn(p, conv(out, p[f"{name}.conv2.weight"], 1, 1), f"{name}.bn2")
        skip = bn(p, conv(x, p[f"{name}.downsample.0.weight"], stride, 0), f"{name}.downsample.1") if downsample else x
        return jax.nn.relu(out + skip)

    def forward(p: dict[str, Any], x: Any) -> Any:
        x = jax.nn.relu(bn(p, conv(x, p["conv1.weight"], 2, 3), "bn1"))
        x = jax.lax.reduce_window(
            x, -jnp.inf, jax.lax.max, (1, 1, 3, 3), (1, 1, 2, 2), [(0, 0), (0, 0), (1, 1), (1, 1)]
        )
        channels = 64
        for s, (cout, stride) in enumerate(STAGES):
            for i in range(BLOCKS_PER_STAGE):
                st = stride if i == 0 else 1
                x = block(p, x, f"layer{s + 1}.{i}", st, st != 1 or channels != cout)
                channels = cout
        return x.mean((2, 3)) @ p["fc.weight"].T + p["fc.bias"]

    return jax.jit(forward), {k: jnp.asarray(v) for k, v in params.items()}
