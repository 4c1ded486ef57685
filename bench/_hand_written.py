"""Hand-written JAX and PyTorch versions of the benchmark models, taking Mithril's parameter dicts
(long names: ``h_0.attn.q_proj.weight``) so all implementations compute the same function."""

from __future__ import annotations

import math
from typing import Any

MLP_LAYERS = 3


def _jax_layers() -> tuple[Any, Any]:
    """``layer_norm(x, params, name)`` and ``linear(x, params, name)`` over Mithril-named parameter dicts."""
    import jax

    def layer_norm(x, p, name):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p[f"{name}.weight"] + p[f"{name}.bias"]

    def linear(x, p, name):
        return x @ p[f"{name}.weight"].T + p[f"{name}.bias"]

    return layer_norm, linear


def jax_models(num_layers: int, heads: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    def mlp(params, x):
        for i in range(MLP_LAYERS):
            x = x @ params[f"weight{i}"].T + params[f"bias{i}"]
            if i < MLP_LAYERS - 1:
                x = jax.nn.relu(x)
        return x

    layer_norm, linear = _jax_layers()

    def attention(x, p, name):
        b, t, d = x.shape
        hd = d // heads

        def split(y):  # [B, T, D] -> [B, H, T, hd]
            return y.reshape(b, t, heads, hd).transpose(0, 2, 1, 3)

        q, k, v = (split(linear(x, p, f"{name}.{n}_proj")) for n in ("q", "k", "v"))
        scores = q @ k.swapaxes(-1, -2) / math.sqrt(hd)
        scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -jnp.inf)
        out = jax.nn.softmax(scores, axis=-1) @ v
        return linear(out.transpose(0, 2, 1, 3).reshape(b, t, d), p, f"{name}.out_proj")

    def stack(params, x):
        for i in range(num_layers):
            h = f"h_{i}"
            x = x + attention(layer_norm(x, params, f"{h}.ln_1"), params, f"{h}.attn")
            hidden = jax.nn.gelu(linear(layer_norm(x, params, f"{h}.ln_2"), params, f"{h}.c_fc"), approximate=True)
            x = x + linear(hidden, params, f"{h}.c_proj")
        return x

    def with_grads(fn):
        def run(params, x, g):
            out, pullback = jax.vjp(lambda p: fn(p, x), params)
            return out, pullback(g)[0]

        return jax.jit(run)

    return {"mlp": (jax.jit(mlp), with_grads(mlp)), "gpt": (jax.jit(stack), with_grads(stack))}


def torch_models(num_layers: int, heads: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    def mlp(params, x):
        for i in range(MLP_LAYERS):
            x = F.linear(x, params[f"weight{i}"], params[f"bias{i}"])
            if i < MLP_LAYERS - 1:
                x = F.relu(x)
        return x

    def stack(params, x):
        b, t, d = x.shape
        hd = d // heads
        for i in range(num_layers):
            h = f"h_{i}"
            y = F.layer_norm(x, (d,), params[f"{h}.ln_1.weight"], params[f"{h}.ln_1.bias"])
            q, k, v = (
                F.linear(y, params[f"{h}.attn.{n}_proj.weight"], params[f"{h}.attn.{n}_proj.bias"])
                .view(b, t, heads, hd)
                .transpose(1, 2)
                for n in ("q", "k", "v")
            )
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + F.linear(attn, params[f"{h}.attn.out_proj.weight"], params[f"{h}.attn.out_proj.bias"])
            y = F.layer_norm(x, (d,), params[f"{h}.ln_2.weight"], params[f"{h}.ln_2.bias"])
            y = F.gelu(F.linear(y, params[f"{h}.c_fc.weight"], params[f"{h}.c_fc.bias"]), approximate="tanh")
            x = x + F.linear(y, params[f"{h}.c_proj.weight"], params[f"{h}.c_proj.bias"])
        return x

    def with_grads(fn):
        def run(params, x, g):
            leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
            out = fn(leaves, x)
            grads = torch.autograd.grad(out, list(leaves.values()), g)
            return out.detach(), dict(zip(leaves, grads, strict=True))

        return run

    def no_grad(fn):
        def run(params, x):
            with torch.no_grad():
                return fn(params, x)

        return run

    return {"mlp": (no_grad(mlp), with_grads(mlp)), "gpt": (no_grad(stack), with_grads(stack))}


def jax_gpt2(num_layers: int, heads: int, tied: bool = True) -> tuple[Any, Any]:
    """A hand-written ``jax.jit`` GPT-2 (token ids -> logits) over parameters named as Hugging Face's
    ``GPT2LMHeadModel`` names them, with ``Linear`` layouts ([out, in]): Mithril's ``create_gpt`` compiled
    with ``use_short_namings=False``. Returns ``(forward, forward_backward)``."""
    import jax

    gpt2 = jax_gpt2_function(num_layers, heads, tied)

    def run(params, ids, g):
        out, pullback = jax.vjp(lambda p: gpt2(p, ids), params)
        return out, pullback(g)[0]

    return jax.jit(gpt2), jax.jit(run)


def jax_gpt2_function(num_layers: int, heads: int, tied: bool = True) -> Any:
    """The GPT-2 of :func:`jax_gpt2` as a plain function ``gpt2(params, ids) -> logits`` (not jitted)."""
    import jax
    import jax.numpy as jnp

    layer_norm, linear = _jax_layers()

    def attention(x, p, name):
        b, t, d = x.shape
        hd = d // heads
        q, k, v = jnp.split(linear(x, p, f"{name}.c_attn"), 3, axis=-1)
        q, k, v = (y.reshape(b, t, heads, hd).transpose(0, 2, 1, 3) for y in (q, k, v))  # [B, H, T, hd]
        scores = q @ k.swapaxes(-1, -2) / math.sqrt(hd)
        scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -jnp.inf)
        out = jax.nn.softmax(scores, axis=-1) @ v
        return linear(out.transpose(0, 2, 1, 3).reshape(b, t, d), p, f"{name}.c_proj")

    def gpt2(params, ids):
        t = ids.shape[1]
        x = params["transformer.wte.weight"][ids] + params["transformer.wpe.weight"][:t]
        for i in range(num_layers):
            h = f"transformer.h.{i}"
            x = x + attention(layer_norm(x, params, f"{h}.ln_1"), params, f"{h}.attn")
            hidden = jax.nn.gelu(linear(layer_norm(x, params, f"{h}.ln_2"), params, f"{h}.mlp.c_fc"), approximate=True)
            x = x + linear(hidden, params, f"{h}.mlp.c_proj")
        x = layer_norm(x, params, "transformer.ln_f")
        head = params["transformer.wte.weight"] if tied else params["lm_head.weight"]
        return x @ head.T

    return gpt2
