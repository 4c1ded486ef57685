"""``ml.compile``'s options, checked once and held in one typed object that the compile stages read.

Example:
    >>> import mithril as ml
    >>> from mithril.models import Linear
    >>> options = compile_options(Linear(4), ml.NumpyBackend(), {"shapes": {"input": [2, 3]}})  # doctest: +SKIP
    >>> options.passes                                                                            # doctest: +SKIP
    {'constant_folding': True, 'cse': True}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import validation
from ..backends.backend import Backend
from ..errors import ArgumentError, ModelConnectionError
from ..types import Dtype
from .flatten import is_logical_model

__all__ = ["ACCEPTED_OPTIONS", "CompileOptions", "compile_options"]

ACCEPTED_OPTIONS = (
    "shapes", "data_keys", "constant_keys", "trainable_keys", "discard_keys", "inference", "jit", "file_path",
    "safe_names", "use_short_namings", "parallelism", "verbose", "jit_options", "static_shapes", "optimizations",
    "optimizer", "loss", "precision", "quantize",
)  # fmt: skip
"""The keyword arguments ``ml.compile`` takes (its docstring says what each does)."""

_PASSES = {"constant_folding": "constant_folding", "cse": "cse", "common_subexpression_elimination": "cse"}
_JIT_OPTIMIZATIONS = {
    "fusion": "operator fusion", "buffer_reuse": "buffer reuse", "layout_optimization": "layout assignment",
}  # fmt: skip
_PRECISIONS = {"float32": None, "32": None, "bf16-mixed": Dtype.bfloat16, "fp16-mixed": Dtype.float16}


@dataclass(frozen=True)
class CompileOptions:
    """What ``ml.compile`` was asked for, checked: the stages read these fields and nothing else."""

    shapes: Mapping[str, Any]
    data_keys: frozenset[str]
    constant_keys: Mapping[str, Any]
    trainable_keys: frozenset[str]
    discard_keys: frozenset[str]
    inference: bool
    jit: bool | None
    will_jit: bool
    """``jit``, or the backend's default when ``jit`` is ``None``."""
    file_path: str | os.PathLike[str] | None
    use_short_namings: bool
    parallelism: str | Mapping[str, Any] | None
    verbose: bool
    jit_options: Mapping[str, Any]
    passes: Mapping[str, bool]
    """Mithril's optional passes: ``constant_folding``, ``cse``."""
    optimizer: Any
    loss: str | None
    precision: str | None
    compute: Dtype | None
    """The mixed-precision compute dtype ``precision`` asks for (``None``: the backend's dtype)."""
    quantize: str | None = None
    """The block format of quantized weights (``"q8_0"``, ``"q4_0"``), for a backend that has them."""


def compile_options(model: Any, backend: Backend[Any], arguments: Mapping[str, Any]) -> CompileOptions:
    """Check ``ml.compile``'s ``model``, ``backend`` and keyword ``arguments``; every refusal names the option,
    what it accepts and what it got."""
    unknown = sorted(set(arguments) - set(ACCEPTED_OPTIONS))
    if unknown:
        raise ArgumentError(f"ml.compile got unknown option(s) {unknown}; accepted: {', '.join(ACCEPTED_OPTIONS)}")
    _check_model_and_backend(model, backend)
    get = arguments.get
    for flag in ("inference", "safe_names", "use_short_namings", "verbose"):
        validation.boolean("ml.compile", flag, get(flag, flag in ("safe_names", "use_short_namings")))
    jit = get("jit")
    if jit is not None:
        validation.boolean("ml.compile", "jit", jit)
    if not get("safe_names", True) and backend.codegen == "python":
        raise ArgumentError(
            "ml.compile: safe_names=False is not available for Python code generation: variable names must be "
            "identifiers"
        )
    file_path = get("file_path")
    if file_path is not None and not isinstance(file_path, (str, os.PathLike)):
        raise ArgumentError(
            f"ml.compile: file_path must be a path (str or os.PathLike), got {type(file_path).__name__}"
        )
    will_jit = backend.jit_by_default if jit is None else jit
    return CompileOptions(
        shapes=validation.mapping("ml.compile", "shapes", get("shapes"), what="a dict of key -> shape template") or {},
        data_keys=frozenset(_keys("data_keys", get("data_keys", ()))),
        constant_keys=dict(
            validation.mapping("ml.compile", "constant_keys", get("constant_keys"), what="a dict of key -> value") or {}
        ),
        trainable_keys=frozenset(_keys("trainable_keys", get("trainable_keys", ()))),
        discard_keys=frozenset(_keys("discard_keys", get("discard_keys", ()))),
        inference=bool(get("inference", False)),
        jit=jit,
        will_jit=will_jit,
        file_path=file_path,
        use_short_namings=bool(get("use_short_namings", True)),
        parallelism=get("parallelism"),
        verbose=bool(get("verbose", False)),
        jit_options=_jit_options(backend, will_jit, get("jit_options"), get("static_shapes")),
        passes=_optimizations(backend, will_jit, get("optimizations")),
        optimizer=get("optimizer"),
        loss=get("loss"),
        precision=get("precision"),
        compute=_mixed_precision(backend, get("precision")),
        quantize=_quantize(backend, get("quantize"), bool(get("inference", False)) and get("optimizer") is None),
    )


def _keys(option: str, value: Any) -> list[str]:
    return list(validation.key_names("ml.compile", option, value))


def _check_model_and_backend(model: Any, backend: Any) -> None:
    if not is_logical_model(model):
        raise ArgumentError(
            f"ml.compile needs a logical model (mithril.models.Model) as its first argument, got {type(model).__name__}"
        )
    if not isinstance(backend, Backend):
        hint = (
            f"; create one: {backend.__name__}()" if isinstance(backend, type) and issubclass(backend, Backend) else ""
        )
        raise ArgumentError(
            "ml.compile needs a backend instance such as ml.NumpyBackend() as its second argument, got "
            f"{backend!r}{hint}"
        )
    if getattr(model, "_parent", None) is not None:
        raise ModelConnectionError(f"{model._path()} is part of another model; compile its root model instead")


def _mixed_precision(backend: Backend[Any], precision: Any) -> Dtype | None:
    """The compute dtype ``precision=`` asks for (``None``: the backend dtype), after checking it fits."""
    if precision is None:
        return None
    if not isinstance(precision, str) or precision not in _PRECISIONS:
        raise ArgumentError(
            f"ml.compile(precision={precision!r}): accepted are {', '.join(map(repr, _PRECISIONS))} or None"
        )
    compute = _PRECISIONS[precision]
    if compute is None:
        return None
    name = type(backend).__name__
    if backend.dtype is not Dtype.float32:
        raise ArgumentError(
            f"ml.compile(precision={precision!r}) keeps float32 parameters; {name} computes in "
            f"{backend.dtype.value}: create it with dtype=ml.float32"
        )
    if compute is Dtype.float16 and backend.backend_type != "torch":
        raise ArgumentError(
            f"ml.compile(precision='fp16-mixed') (float16 with dynamic loss scaling) runs on TorchBackend, not {name}; "
            "use 'bf16-mixed'"
        )
    backend.mixed_precision(lambda params, data: {}, compute)  # the backends without it refuse here
    return compute


def _quantize(backend: Backend[Any], quantize: Any, inference: bool) -> str | None:
    """``quantize=`` checked: a format of the backend's ``quantize_formats``, for inference only."""
    if quantize is None:
        return None
    formats = tuple(getattr(backend, "quantize_formats", ()))
    name = type(backend).__name__
    if not formats:
        raise ArgumentError(
            f"ml.compile(quantize={quantize!r}): {name} has no quantized kernels; block-quantized weights run on "
            "GGMLBackend (and in the C programs of mithril_models.export_program(quantize=...))"
        )
    if quantize not in formats:
        raise ArgumentError(f"ml.compile(quantize={quantize!r}): {name} accepts {', '.join(map(repr, formats))}")
    if not inference:
        raise ArgumentError(
            f"ml.compile(quantize={quantize!r}) is for inference: quantized weights have no gradients; pass "
            "inference=True (and no optimizer)"
        )
    return str(quantize)


def _jit_options(
    backend: Backend[Any], will_jit: bool, options: Mapping[str, Any] | None, static_shapes: bool | None
) -> dict[str, Any]:
    """``jit_options`` checked against the backend's JIT, with what ``static_shapes`` means for it."""
    checked = validation.mapping("ml.compile", "jit_options", options, what="a dict of JIT keyword arguments")
    options = dict(checked or {})
    name = type(backend).__name__
    if static_shapes is not None:
        validation.boolean("ml.compile", "static_shapes", static_shapes)
        options.update(backend.shape_jit_options(static_shapes))
    if not options:
        return options
    accepted = backend.jit_option_names()
    if not accepted:
        raise ArgumentError(
            f"ml.compile(jit_options={options!r}): {name} has no JIT compiler (it runs the generated code directly); "
            "use a JAX, PyTorch or MLX backend"
        )
    if not will_jit:
        raise ArgumentError(
            f"ml.compile(jit_options={options!r}) with jit=False: the options configure {name}'s JIT; pass jit=True"
        )
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ArgumentError(
            f"ml.compile(jit_options=...): {unknown} are not options of {name}'s JIT; accepted: {', '.join(accepted)}"
        )
    return options


def _optimizations(backend: Backend[Any], will_jit: bool, optimizations: Mapping[str, bool] | None) -> dict[str, bool]:
    """Which of Mithril's optional passes run; the JIT compiler's optimisations are checked, not toggled."""
    given = validation.mapping("ml.compile", "optimizations", optimizations, what="a dict of optimisation -> bool")
    passes = {"constant_folding": True, "cse": True}
    jitted = will_jit and bool(backend.jit_option_names())
    for key, value in (given or {}).items():
        validation.boolean("ml.compile", f"optimizations[{key!r}]", value)
        if key in _PASSES:
            passes[_PASSES[key]] = value
        elif key in _JIT_OPTIMIZATIONS:
            _check_jit_optimization(backend, key, value, will_jit, jitted)
        else:
            raise ArgumentError(
                f"ml.compile(optimizations=...): unknown optimisation {key!r}; Mithril's passes: constant_folding, "
                f"cse; the JIT compiler's: {', '.join(_JIT_OPTIMIZATIONS)}"
            )
    return passes


def _check_jit_optimization(backend: Backend[Any], key: str, value: bool, will_jit: bool, jitted: bool) -> None:
    what = _JIT_OPTIMIZATIONS[key]
    if key == "buffer_reuse" and backend.backend_type == "numpy" and value:
        return  # NumPy's generated code writes into dead intermediates itself
    if not jitted:
        raise ArgumentError(
            f"ml.compile(optimizations={{{key!r}: {value}}}): {what} is done by a JIT compiler (XLA, Inductor, "
            f"MLX); {type(backend).__name__} runs {'without JIT' if not will_jit else 'no JIT compiler'} here"
        )
    if not value:
        raise ArgumentError(
            f"ml.compile(optimizations={{{key!r}: False}}): {type(backend).__name__}'s JIT compiler always does "
            f"{what}; Mithril cannot switch it off (compile with jit=False to run without the JIT)"
        )
