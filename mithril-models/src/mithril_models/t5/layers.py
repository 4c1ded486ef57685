"""The blocks of a T5 stack, named after the modules of ``transformers``' T5 so parameter paths match
its checkpoints (``block.0.layer.0.SelfAttention.q.weight``).

``T5Block`` = ``layer.0`` (:class:`T5LayerSelfAttention`), in the decoder ``layer.1``
(:class:`T5LayerCrossAttention`), then the feed-forward :class:`T5LayerFF`. Each sub-layer is pre-norm
(RMSNorm without mean subtraction) with a residual connection; attention is not scaled by 1/sqrt(d)
and self-attention adds the relative position bias that block 0 computes and every block shares (in
the decoder it also carries the causal mask).

Example:
    >>> from mithril_models.t5.config import T5Settings
    >>> s = T5Settings(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4)
    >>> sorted(T5Block(s, first=True, decoder=True).input_keys)
    ['input', 'memory']
"""

from __future__ import annotations

from mithril.extend import initializers, op
from mithril.models import Connection, IOKey, Linear, Model, Primitive, RMSNorm

from .config import T5Settings
from .position_bias import RelativePositionBias

__all__ = ["T5Attention", "T5Block", "T5DenseActDense", "T5LayerCrossAttention", "T5LayerFF", "T5LayerSelfAttention"]


def _heads(model: Model, x: Connection, num_heads: int, d_kv: int) -> Connection:
    """``[B, T, H * d_kv] -> [B, H, T, d_kv]``."""
    return op(model, "transpose", op(model, "reshape", x, shape=(None, None, num_heads, d_kv)), axes=(0, 2, 1, 3))


class T5Attention(Model):
    """Multi-head attention with bias-free ``q``, ``k``, ``v``, ``o`` projections and no 1/sqrt(d) scaling.

    Keys: ``input`` ``[B, T, d_model]``; ``memory`` ``[B, S, d_model]`` (keys and values) when ``cross``;
    ``position_bias`` ``[1, H, T, T]``, added to the self-attention scores: an output when
    ``has_relative_attention_bias`` (child ``relative_attention_bias`` computes it; with ``causal`` it also
    holds the causal mask) and otherwise an input that carries the first block's bias and mask, so
    ``causal`` only matters where the bias is computed; cross-attention has none; ``output``.

    >>> from mithril_models.t5.config import T5Settings
    >>> s = T5Settings(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=4)
    >>> T5Attention(s, cross=True).input_keys
    ['input', 'memory']
    """

    def __init__(
        self,
        settings: T5Settings,
        *,
        causal: bool = False,
        cross: bool = False,
        has_relative_attention_bias: bool = False,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        s = settings
        source = "memory" if cross else "input"
        heads = {}
        for proj, key in (("q", "input"), ("k", source), ("v", source)):
            # HF's T5 initialisation: q's std also divides by sqrt(d_kv) (attention is unscaled)
            std = s.initializer_factor * (s.d_model * (s.d_kv if proj == "q" else 1)) ** -0.5
            linear = Linear(
                s.inner_dim, use_bias=False, in_features=s.d_model, weight_init=initializers.normal(std), name=proj
            )
            self |= linear(input=IOKey(key, shape=[None, None, s.d_model]))
            heads[proj] = _heads(self, linear.output, s.num_heads, s.d_kv)
        if cross:  # no position bias, no mask: the fused primitive
            sdpa = Primitive("scaled_dot_product_attention", scale=1.0)
            self |= sdpa(query=heads["q"], key=heads["k"], value=heads["v"])
            attended = sdpa.output
        else:
            if has_relative_attention_bias:
                relative = RelativePositionBias(
                    s.num_buckets,
                    s.max_distance,
                    s.num_heads,
                    causal=causal,
                    init=initializers.normal(s.initializer_factor * s.d_model**-0.5),
                    name="relative_attention_bias",
                )
                self |= relative(input="input")
                bias: Connection = relative.output
                self.expose(bias, "position_bias", canonical=False)
            else:
                bias = self._declare_input("position_bias")
            # written out rather than scaled_dot_product_attention(mask=bias): the primitive's mask is not
            # differentiable, and the relative attention bias must be trainable on every backend
            scores = op(self, "matmul", heads["q"], op(self, "swapaxes", heads["k"], axis1=-2, axis2=-1)) + bias
            attended = op(self, "matmul", op(self, "softmax", scores, axis=-1), heads["v"])
        merged = op(
            self, "reshape", op(self, "transpose", attended, axes=(0, 2, 1, 3)), shape=(None, None, s.inner_dim)
        )
        out_std = s.initializer_factor * s.inner_dim**-0.5
        out = Linear(
            s.d_model, use_bias=False, in_features=s.inner_dim, weight_init=initializers.normal(out_std), name="o"
        )
        self |= out(input=merged, output=IOKey("output"))
        self._cin = self._keys["input"]

    def _declare_input(self, name: str) -> Connection:
        self.apply_iokey(self._graph.new_value(), IOKey(name, type="float"), f"{type(self).__name__}.{name}")
        return Connection(self, name)


class T5DenseActDense(Model):
    """The feed-forward ``wo(act(wi(x)))``, or gated ``wo(act(wi_0(x)) * wi_1(x))``; no biases.

    >>> from mithril_models.t5.config import T5Settings
    >>> s = T5Settings(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=4)
    >>> T5DenseActDense(s).input_keys
    ['input']
    """

    def __init__(self, settings: T5Settings, *, name: str | None = None) -> None:
        super().__init__(name=name)
        s = settings
        x = IOKey("input", shape=[None, None, s.d_model])
        wi_init = initializers.normal(s.initializer_factor * s.d_model**-0.5)
        wo_init = initializers.normal(s.initializer_factor * s.d_ff**-0.5)
        if s.gated:
            gate = Linear(s.d_ff, use_bias=False, weight_init=wi_init, name="wi_0")
            linear = Linear(s.d_ff, use_bias=False, weight_init=wi_init, name="wi_1")
            self |= gate(input=x)
            self |= linear(input="input")
            hidden = _activation(self, gate.output, s.activation) * linear.output
        else:
            wi = Linear(s.d_ff, use_bias=False, weight_init=wi_init, name="wi")
            self |= wi(input=x)
            hidden = _activation(self, wi.output, s.activation)
        wo = Linear(s.d_model, use_bias=False, in_features=s.d_ff, weight_init=wo_init, name="wo")
        self |= wo(input=hidden, output=IOKey("output"))
        self._cin = self._keys["input"]


def _activation(model: Model, x: Connection, name: str) -> Connection:
    if name == "relu":
        return op(model, "relu", x)
    if name in ("gelu", "gelu_new"):
        return op(model, "gelu", x, approximate=name == "gelu_new")
    if name == "silu":
        gated: Connection = x * op(model, "sigmoid", x)
        return gated
    raise ValueError(f"T5: unsupported activation {name!r}")  # parse_feed_forward_proj refuses it first


class _PreNormResidual(Model):
    """``input + sublayer(layer_norm(input))``: the shape of every T5 sub-layer."""

    def _wire(self, settings: T5Settings, sublayer: Model, **connections: object) -> None:
        norm = RMSNorm(settings.d_model, eps=settings.eps, name="layer_norm")
        self |= norm(input=IOKey("input", shape=[None, None, settings.d_model]))
        self |= sublayer(input=norm.output, **connections)
        self.expose(Connection(self, "input") + sublayer.output)
        self._cin = self._keys["input"]


class T5LayerSelfAttention(_PreNormResidual):
    """``layer.0`` of a block: child ``SelfAttention`` (a :class:`T5Attention`) and ``layer_norm``.

    In the first block ``position_bias`` is an output (computed here), in the others an input.

    >>> from mithril_models.t5.config import T5Settings
    >>> s = T5Settings(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4)
    >>> T5LayerSelfAttention(s, first=True, causal=False).output_keys
    ['output', 'position_bias']
    """

    def __init__(self, settings: T5Settings, *, first: bool, causal: bool, name: str | None = None) -> None:
        super().__init__(name=name)
        attention = T5Attention(settings, causal=causal, has_relative_attention_bias=first, name="SelfAttention")
        if first:
            self._wire(settings, attention)
            self.expose(attention.position_bias, "position_bias", canonical=False)
        else:
            self._wire(settings, attention, position_bias=IOKey("position_bias"))


class T5LayerCrossAttention(_PreNormResidual):
    """``layer.1`` of a decoder block: child ``EncDecAttention`` over ``memory`` (no position bias).

    >>> from mithril_models.t5.config import T5Settings
    >>> s = T5Settings(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4)
    >>> T5LayerCrossAttention(s).input_keys
    ['input', 'memory']
    """

    def __init__(self, settings: T5Settings, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._wire(settings, T5Attention(settings, cross=True, name="EncDecAttention"), memory=IOKey("memory"))


class T5LayerFF(_PreNormResidual):
    """The last sub-layer of a block: child ``DenseReluDense`` (a :class:`T5DenseActDense`) and ``layer_norm``.

    >>> from mithril_models.t5.config import T5Settings
    >>> s = T5Settings(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4)
    >>> T5LayerFF(s).input_keys
    ['input']
    """

    def __init__(self, settings: T5Settings, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._wire(settings, T5DenseActDense(settings, name="DenseReluDense"))


class T5Block(Model):
    """One T5 block: ``layer.0`` self-attention, ``layer.1`` cross-attention (decoder only), feed-forward.

    Keys: ``input``, ``memory`` (decoder), ``position_bias`` (an output of the first block, an input of
    the others), ``output``.

    >>> from mithril_models.t5.config import T5Settings
    >>> s = T5Settings(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4)
    >>> sorted(T5Block(s, first=False, decoder=False).input_keys)
    ['input', 'position_bias']
    """

    def __init__(self, settings: T5Settings, *, first: bool, decoder: bool, name: str | None = None) -> None:
        super().__init__(name=name)
        self_attention = T5LayerSelfAttention(settings, first=first, causal=decoder, name="layer.0")
        self |= self_attention(input=IOKey("input"), **({} if first else {"position_bias": IOKey("position_bias")}))
        hidden = self_attention.output
        if decoder:
            cross = T5LayerCrossAttention(settings, name="layer.1")
            self |= cross(input=hidden, memory=IOKey("memory"))
            hidden = cross.output
        ff = T5LayerFF(settings, name=f"layer.{2 if decoder else 1}")
        self |= ff(input=hidden, output=IOKey("output"))
        if first:
            self.expose(self_attention.position_bias, "position_bias", canonical=False)
        self._cin = self._keys["input"]
