"""Blocks shared by CLIP's towers: multi-head attention, the pre-LayerNorm transformer block, learned tables.

Children are named after ``transformers``' CLIP modules (``self_attn.q_proj``, ``layer_norm1``, ``mlp.fc1``),
so a tower compiled with ``use_short_namings=False`` has Hugging Face's parameter names.

Example:
    >>> block = EncoderLayer(width=32, heads=4, intermediate_size=128, causal=True, name="layers.0")
    >>> block.input_keys, block.output_keys
    (['input'], ['output'])
"""

from __future__ import annotations

from typing import Any

from mithril.extend import initializers, op, param
from mithril.models import Connection, IOKey, LayerNorm, Linear, Model

from .config import TextConfig, VisionConfig

__all__ = ["Attention", "EncoderLayer", "LearnedTable", "activation", "attend"]


def activation(model: Model, x: Connection, kind: str) -> Connection:
    """``quick_gelu`` (``x * sigmoid(1.702 x)``, OpenAI's QuickGELU) or exact ``gelu`` applied to ``x``.

    >>> from mithril.models import IOKey, Model, Relu
    >>> model = Model()
    >>> model |= Relu()(input=IOKey("x"))
    >>> model.expose(activation(model, model.cout, "quick_gelu"), "y")
    """
    if kind == "quick_gelu":
        gated: Connection = x * op(model, "sigmoid", x * 1.702)
        return gated
    if kind == "gelu":
        return op(model, "gelu", x, approximate=False)
    raise ValueError(f"clip: unsupported activation {kind!r}; expected 'quick_gelu' or 'gelu'")


def attend(
    model: Model,
    query: Any,
    memory: Any,
    width: int,
    heads: int,
    *,
    causal: bool = False,
    out_width: int | None = None,
    out_name: str = "out_proj",
    inits: tuple[str, str] | None = None,
) -> Connection:
    """Add multi-head attention of ``query`` over ``memory`` (both ``[batch, tokens, width]``) to ``model``.

    The projections become children of ``model`` named ``q_proj``, ``k_proj``, ``v_proj`` and ``out_name``
    (each a ``Linear`` with bias), so a caller keeps the checkpoint's flat names (OpenAI's
    ``attnpool.q_proj``). ``query``/``memory`` are connections or keys (``IOKey``); returns the output.

    >>> from mithril.models import IOKey, Model
    >>> model = Model()
    >>> model.expose(attend(model, IOKey("q", shape=[None, 1, 32]), IOKey("kv", shape=[None, None, 32]), 32, 4), "y")
    >>> sorted(name for name, _ in model._children if name.endswith("proj"))
    ['k_proj', 'out_proj', 'q_proj', 'v_proj']
    """
    if width % heads:
        raise ValueError(f"clip attention: width={width} is not divisible by heads={heads}")
    head_dim = width // heads
    split: dict[str, Connection] = {}
    in_init, out_init = inits if inits is not None else (None, None)
    bias_init = "zeros" if inits is not None else None  # HF's CLIP zeroes every linear bias
    for proj, source in (("q_proj", query), ("k_proj", memory), ("v_proj", memory)):
        linear = Linear(width, weight_init=in_init, bias_init=bias_init, name=proj)
        model |= linear(input=source)
        per_head = linear.output.reshape(None, None, heads, head_dim)  # [B, T, H, D]
        split[proj] = per_head.transpose(0, 2, 1, 3)  # [B, H, T, D]
    attended = op(
        model, "scaled_dot_product_attention", split["q_proj"], split["k_proj"], split["v_proj"], causal=causal
    )
    merged = attended.transpose(0, 2, 1, 3).reshape(None, None, width)  # [B, T, width]
    out = Linear(out_width or width, weight_init=out_init, bias_init=bias_init, name=out_name)
    model |= out(input=merged)
    return out.output


class Attention(Model):
    """Multi-head self-attention over ``[batch, tokens, width]`` (``input`` -> ``output``), see :func:`attend`.

    >>> Attention(width=32, heads=4, causal=True).output_keys
    ['output']
    """

    def __init__(
        self,
        width: int,
        heads: int,
        *,
        causal: bool = False,
        inits: tuple[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        tokens = IOKey("input", shape=[None, None, width])
        self.expose(attend(self, tokens, tokens, width, heads, causal=causal, inits=inits))
        self._cin = self._keys["input"]


class EncoderLayer(Model):
    """``x + attn(ln1(x))`` then ``x + fc2(act(fc1(ln2(x))))`` (CLIP's residual attention block).

    >>> EncoderLayer(width=32, heads=4, intermediate_size=128).output_keys
    ['output']
    """

    def __init__(
        self,
        width: int,
        heads: int,
        intermediate_size: int,
        *,
        causal: bool = False,
        layer_norm_eps: float = 1e-5,
        act: str = "quick_gelu",
        num_layers: int | None = None,
        name: str | None = None,
    ) -> None:
        """``num_layers`` (of the tower) gives the layer Hugging Face CLIP's initialisation: normal with std
        ``width**-0.5 * (2 * num_layers)**-0.5`` for q/k/v and ``fc2``, ``width**-0.5`` for ``out_proj``,
        ``(2 * width)**-0.5`` for ``fc1``, zero biases (without it: PyTorch's defaults)."""
        super().__init__(name=name)
        inits = fc1_init = fc2_init = bias_init = None
        if num_layers is not None:
            in_std = width**-0.5 * (2 * num_layers) ** -0.5
            inits = (initializers.normal(in_std), initializers.normal(width**-0.5))
            fc1_init, fc2_init, bias_init = (
                initializers.normal((2 * width) ** -0.5),
                initializers.normal(in_std),
                "zeros",
            )
        norm1 = LayerNorm(width, eps=layer_norm_eps, name="layer_norm1")
        self |= norm1(input=IOKey("input", shape=[None, None, width]))
        attn = Attention(width, heads, causal=causal, inits=inits, name="self_attn")
        self |= attn(input=norm1.output)
        hidden = Connection(self, "input") + attn.output
        norm2 = LayerNorm(width, eps=layer_norm_eps, name="layer_norm2")
        self |= norm2(input=hidden)
        fc1 = Linear(intermediate_size, weight_init=fc1_init, bias_init=bias_init, name="mlp.fc1")
        self |= fc1(input=norm2.output)
        fc2 = Linear(width, weight_init=fc2_init, bias_init=bias_init, name="mlp.fc2")
        self |= fc2(input=activation(self, fc1.output, act))
        self.expose(hidden + fc2.output)
        self._cin = self._keys["input"]


def encoder_layers(
    tower: Model, hidden: Any, config: TextConfig | VisionConfig, layers: int, prefix: str, *, causal: bool = False
) -> Any:
    """A tower's ``layers`` :class:`EncoderLayer` blocks (named ``{prefix}.<i>``, sized and initialised from
    ``config``) added to ``tower`` one after the other from ``hidden``: the last one's output."""
    for i in range(layers):
        layer = EncoderLayer(
            config.width,
            config.heads,
            config.intermediate_size,
            causal=causal,
            layer_norm_eps=config.layer_norm_eps,
            act=config.activation,
            num_layers=layers,
            name=f"{prefix}.{i}",
        )
        tower |= layer(input=hidden)
        hidden = layer.output
    return hidden


class LearnedTable(Model):
    """A learned table added to the input: ``output = input + weight`` (``weight`` is ``shape``).

    Holds position embeddings used whole (a ViT's ``position_embedding.weight``, OpenAI's attention-pooling
    ``positional_embedding``) under the checkpoint's parameter name ``key``.

    >>> LearnedTable([5, 32]).input_keys
    ['input', 'weight']
    """

    def __init__(self, shape: list[Any], key: str = "weight", *, init: str = "normal", name: str | None = None) -> None:
        super().__init__(name=name)
        total = op(self, "add", IOKey("input"), param(key, init=init, shape=shape))
        self.expose(total)
        self._cin = self._keys["input"]
