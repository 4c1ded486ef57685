"""Normalisation blocks built from primitives: LayerNorm, RMSNorm, GroupNorm, BatchNorm2d."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import validation
from ...errors import ArgumentError
from ...framework.keys import TBD, Connection, IOKey, materialize_expression
from ...framework.model import Model
from ..primitive import Primitive
from ._util import op, param, set_given

__all__ = ["BatchNorm2D", "BatchNorm2d", "GroupNorm", "LayerNorm", "RMSNorm", "batch_norm2d_decomposition"]

_PER_CHANNEL = (-1, 1, 1)  # a [C] vector against [N, C, H, W]


def _param_shapes(**templates: list[Any] | None) -> dict[str | Connection, Any]:
    """The shape templates given (``None``: a parameter the block does not have), for ``set_shapes``."""
    return {key: template for key, template in templates.items() if template is not None}


def _normalize(model: Model, x: Connection, axis: object, eps: float) -> Connection:
    """``(x - mean) / sqrt(var + eps)`` over ``axis`` (two-pass, numerically stable)."""
    centered = x - op(model, "mean", x, axis=axis, keepdim=True)
    variance = op(model, "mean", centered * centered, axis=axis, keepdim=True)
    normalized: Connection = centered * op(model, "rsqrt", variance + eps)
    return normalized


def _affine(model: Model, x: Connection, scale: bool, bias: bool, reshape: tuple[int, ...] | None = None) -> Connection:
    if scale:
        weight = op(model, "reshape", IOKey("weight"), shape=reshape) if reshape else None
        x = x * (weight if weight is not None else Connection(model, "weight"))
    if bias:
        b = op(model, "reshape", IOKey("bias"), shape=reshape) if reshape else None
        x = x + (b if b is not None else Connection(model, "bias"))
    return x


def _scale_and_shift(
    model: Model, centered: Connection, variance: Connection, eps: float, scale: bool, shift: bool
) -> Connection:
    """``centered * rsqrt(variance + eps) * weight + bias`` per channel of ``[N, C, H, W]``; the per-channel
    factor first: one pass over the activations for the scale, not two."""
    factor = op(model, "rsqrt", variance + eps)
    if scale:
        factor = factor * op(model, "reshape", IOKey("weight"), shape=_PER_CHANNEL)
    out: Connection = centered * factor
    if shift:
        out = out + op(model, "reshape", IOKey("bias"), shape=_PER_CHANNEL)
    return out


def batch_norm2d_decomposition(attrs: Mapping[str, Any], shapes: Mapping[str, Any]) -> Model:
    """The ``batch_norm2d`` primitive in primitives (what every backend but PyTorch compiles): the batch
    mean and biased variance over ``(N, H, W)`` (two-pass), the per-channel factor ``rsqrt(var + eps) *
    weight`` first (one pass over the activations for the scale, not two), then ``+ bias``; the statistics
    leave through ``stop_gradient``, as PyTorch's kernel returns them.

    >>> batch_norm2d_decomposition({"eps": 1e-5}, {"weight": None, "bias": None}).output_keys
    ['output', 'mean', 'var']
    """
    model = Model()
    x = IOKey("input")
    mean = op(model, "mean", x, axis=(0, 2, 3), keepdim=True)
    centered = x - mean
    variance = op(model, "mean", centered * centered, axis=(0, 2, 3), keepdim=True)
    out = _scale_and_shift(
        model, centered, variance, attrs["eps"], shapes.get("weight") is not None, shapes.get("bias") is not None
    )
    model.expose(materialize_expression(out, model), "output", canonical=True)
    for key, stat in (("mean", mean), ("var", variance)):
        model.expose(op(model, "stop_gradient", op(model, "reshape", stat, shape=(-1,))), key)
    return model


def _batch_norm_args(
    where: str, num_features: Any, eps: Any, momentum: Any, **flags: Any
) -> tuple[int | None, float, float]:
    """A batch norm's checked ``num_features`` (a positive int or ``None``), ``eps`` (``>= 0``) and ``momentum``
    (in ``[0, 1]``), after checking that each of ``flags`` is a bool."""
    for flag, value in flags.items():
        validation.boolean(where, flag, value)
    return (
        validation.positive_int(where, "num_features", num_features, optional=True),
        validation.number(where, "eps", eps, low=0.0),
        validation.number(where, "momentum", momentum, low=0.0, high=1.0),
    )


class _Norm(Model):
    def _declare(self, key: IOKey) -> Connection:
        """Create a named key of this block before any child uses it."""
        self.apply_iokey(self._graph.new_value(), key, f"{type(self).__name__}.{key.name}")
        return Connection(self, key.name)  # type: ignore[arg-type]

    def _params(self, dim: int | None, scale: bool, bias: bool) -> None:
        if scale:
            self._declare(param("weight", init="ones", shape=[dim]))
        if bias:
            self._declare(param("bias", init="zeros", shape=[dim]))

    def _finish(self, out: Connection) -> None:
        self.expose(out)
        self._cin = self._keys["input"]
        # Mithril's key order (input, weight, bias): ``LayerNorm().connect(x)`` connects ``input``
        self._keys = {"input": self._keys["input"], **{k: v for k, v in self._keys.items() if k != "input"}}


class LayerNorm(_Norm):
    """Normalise over the last axis, then ``* weight + bias`` (both ``[dim]``). ``LayerNorm(eps=1e-5)``."""

    def __init__(
        self,
        dim: int | None = None,
        eps: float = 1e-5,
        use_scale: bool = True,
        use_bias: bool = True,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        dim = validation.positive_int("LayerNorm", "dim", dim, optional=True)
        eps = validation.number("LayerNorm", "eps", eps, low=0.0)
        use_scale, use_bias = (
            validation.boolean("LayerNorm", "use_scale", use_scale),
            validation.boolean("LayerNorm", "use_bias", use_bias),
        )
        self._params(dim, use_scale, use_bias)
        x = self._declare(IOKey("input"))
        out = _affine(self, _normalize(self, x, -1, eps), use_scale, use_bias)
        self.set_shapes(
            _param_shapes(
                input=[("B", ...), "d"], weight=["d"] if use_scale else None, bias=["d"] if use_bias else None
            )
        )
        self._finish(out)


class RMSNorm(_Norm):
    """``x * rsqrt(mean(x**2, -1) + eps) * weight`` (T5/LLaMA). ``RMSNorm(eps=1e-6)``."""

    def __init__(
        self, dim: int | None = None, eps: float = 1e-6, use_scale: bool = True, *, name: str | None = None
    ) -> None:
        super().__init__(name=name)
        dim = validation.positive_int("RMSNorm", "dim", dim, optional=True)
        eps = validation.number("RMSNorm", "eps", eps, low=0.0)
        use_scale = validation.boolean("RMSNorm", "use_scale", use_scale)
        self._params(dim, use_scale, False)
        x = self._declare(IOKey("input"))
        mean_square = op(self, "mean", op(self, "square", x), axis=-1, keepdim=True)
        out = _affine(self, x * op(self, "rsqrt", mean_square + eps), use_scale, False)
        self.set_shapes(_param_shapes(input=[("B", ...), "d"], weight=["d"] if use_scale else None))
        self._finish(out)


class GroupNorm(_Norm):
    """Normalise ``[N, C, *spatial]`` over groups of channels, then a per-channel affine.

    ``GroupNorm(num_groups=32, num_channels=256)``; ``spatial_dims`` is 2 for images.
    """

    def __init__(
        self,
        num_groups: int,
        num_channels: int | None = None,
        eps: float = 1e-5,
        affine: bool = True,
        *,
        spatial_dims: int = 2,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        num_groups = validation.positive_int("GroupNorm", "num_groups", num_groups)
        num_channels = validation.positive_int("GroupNorm", "num_channels", num_channels, optional=True)
        if num_channels is not None and num_channels % num_groups:
            raise ArgumentError(f"GroupNorm: num_channels={num_channels} must be divisible by num_groups={num_groups}")
        eps = validation.number("GroupNorm", "eps", eps, low=0.0)
        affine = validation.boolean("GroupNorm", "affine", affine)
        spatial_dims = validation.positive_int("GroupNorm", "spatial_dims", spatial_dims, minimum=0)
        self._params(num_channels, affine, affine)
        x = self._declare(IOKey("input", shape=["N", num_channels, *([None] * spatial_dims)]))
        grouped = op(self, "reshape", x, shape=(None, num_groups, -1))
        restored = op(self, "reshape_like", _normalize(self, grouped, -1, eps), x)
        out = _affine(self, restored, affine, affine, reshape=(-1,) + (1,) * spatial_dims)
        if affine:
            self.set_shapes(input=["N", "C", *([None] * spatial_dims)], weight=["C"], bias=["C"])
        self._finish(out)


class BatchNorm2d(_Norm):
    """Batch normalisation over ``(N, H, W)`` of ``[N, C, H, W]`` (PyTorch's ``BatchNorm2d``).

    Args:
        num_features: channels ``C`` (inferred from the input when ``None``).
        eps: added to the variance.
        momentum: weight of the batch statistics in the running-statistics update.
        affine: learn a per-channel ``weight`` and ``bias``.
        track_running_stats: keep the buffers ``running_mean`` (zeros) and ``running_var`` (ones),
            passed with the parameters and never differentiated.
        use_batch_stats: ``True`` (training, PyTorch's ``train()``): normalise with the batch statistics;
            with ``track_running_stats`` the compiled model also returns the updated running statistics
            (``running_mean_new``/``running_var_new``; apply them with ``pm.update_buffers``), as
            PyTorch does: ``(1 - momentum) * running + momentum * batch`` with the unbiased batch variance;
            like PyTorch's buffers they carry no gradient. The normalisation is the ``batch_norm2d``
            primitive (PyTorch's kernel on PyTorch, its decomposition elsewhere).
            ``False`` (inference, PyTorch's ``eval()``): normalise with the running statistics.

    >>> bn = BatchNorm2d(4, use_batch_stats=False)
    >>> sorted(bn.input_keys)
    ['bias', 'input', 'running_mean', 'running_var', 'weight']
    """

    def __init__(
        self,
        num_features: int | None = None,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        *,
        use_batch_stats: bool = True,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        num_features, eps, momentum = _batch_norm_args(
            "BatchNorm2d", num_features, eps, momentum,
            affine=affine, track_running_stats=track_running_stats, use_batch_stats=use_batch_stats,
        )  # fmt: skip
        if not use_batch_stats and not track_running_stats:
            raise ArgumentError(
                "BatchNorm2d: inference (use_batch_stats=False) needs the running statistics "
                "(track_running_stats=True), got track_running_stats=False"
            )
        self._build(num_features, eps, momentum, affine, affine, track_running_stats, use_batch_stats)

    def _build(
        self, num_features: int | None, eps: float, momentum: float, scale: bool, shift: bool,
        track_running_stats: bool, use_batch_stats: bool,
    ) -> None:  # fmt: skip
        """The block's graph; ``scale``/``shift``: learn ``weight``/``bias`` (PyTorch's ``affine`` is both)."""
        self._params(num_features, scale, shift)
        x = self._declare(IOKey("input", shape=["N", num_features, None, None]))
        running = {}
        if track_running_stats:
            for key, init in (("running_mean", "zeros"), ("running_var", "ones")):
                running[key] = self._declare(IOKey(key, shape=[num_features], type="float", buffer=True, init=init))
        if use_batch_stats:  # one primitive: PyTorch runs its batch-norm kernel, the others the decomposition

            norm = Primitive("batch_norm2d", eps=eps)
            self |= norm(input=x, **({"weight": "weight"} if scale else {}), **({"bias": "bias"} if shift else {}))
            out = norm.output
            if track_running_stats:  # from the batch statistics already computed: no further pass over the input
                count = op(self, "size", x) / op(self, "size", running["running_mean"])  # N * H * W
                batch = {"running_mean": norm.mean, "running_var": norm.var * (count / (count - 1.0))}  # unbiased
                for key, stat in batch.items():
                    self.set_buffer_update(key, running[key] * (1.0 - momentum) + stat * momentum)
        else:
            stats = {key: op(self, "reshape", value, shape=_PER_CHANNEL) for key, value in running.items()}
            out = _scale_and_shift(self, x - stats["running_mean"], stats["running_var"], eps, scale, shift)
        self.set_shapes(
            _param_shapes(input=["N", "C", None, None], weight=["C"] if scale else None, bias=["C"] if shift else None)
        )
        self._finish(out)


class BatchNorm2D(BatchNorm2d):
    """Mithril's spelling and defaults: ``BatchNorm2D(num_features, use_scale=True, use_bias=True, eps=1e-5,
    momentum=0.1, inference=True)``. ``inference=True`` (the default) normalises with the running statistics
    (:class:`BatchNorm2d` with ``use_batch_stats=False``); ``inference=False`` with the batch's, returning the
    updated running statistics. ``input``, ``weight`` and ``bias`` may be given values, as Mithril's keys.

    >>> sorted(BatchNorm2D(4, use_bias=False).input_keys)
    ['input', 'running_mean', 'running_var', 'weight']
    """

    def __init__(
        self,
        num_features: int | None = None,
        use_scale: bool = True,
        use_bias: bool = True,
        eps: float = 1e-5,
        momentum: float = 0.1,
        inference: bool = True,
        *,
        input: Any = TBD,
        weight: Any = TBD,
        bias: Any = TBD,
        name: str | None = None,
    ) -> None:
        _Norm.__init__(self, name=name)
        num_features, eps, momentum = _batch_norm_args(
            "BatchNorm2D", num_features, eps, momentum, use_scale=use_scale, use_bias=use_bias, inference=inference
        )
        self._build(num_features, eps, momentum, use_scale, use_bias, True, not inference)
        set_given(self, input=input, weight=weight, bias=bias)
