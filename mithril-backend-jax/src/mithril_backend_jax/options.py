"""The manual's ``JaxBackend`` options, mapped to what JAX really does.

* ``precision=``: a dtype name (``"float64"``, ``"bfloat16"``, ...) is the backend dtype; a matmul precision
  (``jax.lax.Precision.HIGHEST``, ``"highest"``, ``"high"``, ``"default"``, ``"tensorfloat32"``) becomes the
  default precision of every dot/conv the backend runs (``jax.default_matmul_precision``, scoped to the
  backend like its x64 state, so other code in the process is unaffected).
* ``xla_flags=[...]``: appended to ``XLA_FLAGS`` before JAX starts its backends; once JAX has started, XLA
  has already read the variable, so new flags are an error (flags already in effect are accepted).
* ``debug=True``: NaN checking (``jax.debug_nans``): an operation producing a NaN raises
  ``FloatingPointError`` naming it. Scoped to the backend.

Example:
    >>> from mithril_backend_jax.options import matmul_precision
    >>> matmul_precision("HIGHEST"), matmul_precision("float64")
    ('highest', None)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from mithril.errors import ArgumentError
from mithril.types import Dtype

__all__ = [
    "apply_xla_flags", "argnums", "jax_started", "matmul_precision", "precision_dtype", "shifted", "unwrap_static",
    "wrap_static",
]  # fmt: skip

_MATMUL = {
    "default": "default", "high": "high", "highest": "highest", "fastest": "default", "tensorfloat32": "tensorfloat32",
}  # fmt: skip
_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _name(precision: Any) -> str:
    name = getattr(precision, "name", None)  # jax.lax.Precision.HIGHEST, ml.float64
    text = name if isinstance(name, str) else str(precision)
    return text.rsplit(".", 1)[-1].lower()


def precision_dtype(precision: Any) -> Dtype | None:
    """The dtype a ``precision=`` names (``"float64"``, ``ml.bfloat16``), or ``None`` for a matmul precision."""
    name = _name(precision)
    return Dtype.parse(name) if name in _DTYPES else None


def matmul_precision(precision: Any) -> str | None:
    """The ``jax.default_matmul_precision`` name of a ``precision=`` (``None`` when it names a dtype).

    Raises ``ArgumentError`` listing the accepted values for anything else.
    """
    name = _name(precision)
    if name in _DTYPES:
        return None
    if name not in _MATMUL:
        raise ArgumentError(
            f"JaxBackend(precision={precision!r}): expected a dtype ({', '.join(_DTYPES)}) or a matmul precision "
            f"(jax.lax.Precision.DEFAULT/HIGH/HIGHEST or {', '.join(sorted(_MATMUL))})"
        )
    return _MATMUL[name]


def jax_started() -> bool:
    """Whether JAX has started its backends (after which XLA has read ``XLA_FLAGS``)."""
    from jax._src import xla_bridge

    return bool(xla_bridge.backends_are_initialized())


def apply_xla_flags(flags: Sequence[str] | str) -> tuple[str, ...]:
    """Append ``flags`` to ``XLA_FLAGS`` if JAX has not started yet; returns the flags.

    After JAX started, flags not already in ``XLA_FLAGS`` raise ``ArgumentError`` (XLA reads it once).
    """
    given = (flags,) if isinstance(flags, str) else tuple(flags)
    bad = [f for f in given if not isinstance(f, str) or not f.startswith("--")]
    if bad:
        raise ArgumentError(
            "JaxBackend(xla_flags=...): each flag is a string starting with '--' "
            f"(e.g. '--xla_cpu_enable_fast_math=false'), got {bad!r}"
        )
    current = os.environ.get("XLA_FLAGS", "").split()
    missing = [f for f in given if f not in current]
    if not missing:
        return given
    if jax_started():
        raise ArgumentError(
            f"JaxBackend(xla_flags={list(given)!r}): JAX has already started in this process and XLA reads "
            f"XLA_FLAGS only once, so {missing} cannot take effect. Create the first JaxBackend with xla_flags= "
            "before any other JAX call (jax.devices(), jnp arrays), or set XLA_FLAGS in the environment before "
            f"Python starts (current XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r})"
        )
    os.environ["XLA_FLAGS"] = " ".join([*current, *missing])
    return given


# -- jit_options ---------------------------------------------------------------------------------
def argnums(options: Mapping[str, Any], name: str) -> tuple[int, ...]:
    """``options[name]`` (an int or a tuple of ints) as a tuple; ``()`` when absent."""
    value = options.get(name)
    if value is None:
        return ()
    found = (value,) if isinstance(value, int) else tuple(value)
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in found):
        raise ArgumentError(
            f"jit_options={{{name!r}: {value!r}}}: expected argument positions (ints >= 0; 0 is params, 1 is data)"
        )
    return found


def shifted(options: Mapping[str, Any], shift: int) -> dict[str, Any]:
    """``options`` with every ``*_argnums`` position moved by ``shift`` (arguments put in front)."""
    result = dict(options)
    for name in ("static_argnums", "donate_argnums"):
        if name in result:
            result[name] = tuple(i + shift for i in argnums(options, name))
    return result


class _Static:
    """A static ``jax.jit`` argument compared by the identity of its arrays (hashable where a dict of arrays
    is not): the same dict object (same arrays) reuses the compiled program, another one recompiles."""

    def __init__(self, value: Any) -> None:
        import jax

        self.value = value
        self._ids = tuple(id(leaf) for leaf in jax.tree_util.tree_leaves(value))
        self._structure: object = jax.tree_util.tree_structure(value)  # a PyTreeDef (jaxlib has no stubs)

    def __hash__(self) -> int:
        return hash(self._ids)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Static) and self._ids == other._ids and self._structure == other._structure


def wrap_static(args: tuple[Any, ...], positions: tuple[int, ...]) -> tuple[Any, ...]:
    """``args`` with the static positions wrapped for ``jax.jit``."""
    if not positions:
        return args
    return tuple(_Static(a) if i in positions else a for i, a in enumerate(args))


def unwrap_static(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.value if isinstance(a, _Static) else a for a in args)
