"""``at_least_1d``, ``unique`` and the primitives whose results are Python values (``item``, ``to_list``,
``to_tuple``), written once for every namespace (PyTorch's included). A namespace without ``unique``
(MLX) gets no ``unique``; the backend then declares it a gap.

Values known only when the program runs cannot be traced: ``unique`` (its length depends on the values)
and ``item`` under ``jax.jit`` raise JAX's concretization error, which JAX's backend turns into a clear
one (compile with ``jit=False``).

Example:
    >>> import numpy as np
    >>> from mithril.backends.array_api import Binding
    >>> table = build(Binding(np, {}))
    >>> table["unique"](np.array([3, 1, 3, 2])).tolist(), table["to_tuple"](1.0, 2.0, n=2)
    ([1, 2, 3], (1.0, 2.0))
"""

from __future__ import annotations

from typing import Any

from ...errors import UnsupportedPrimitiveError
from ._binding import Binding, Impl

__all__ = ["build", "eager_only", "item", "to_list", "to_tuple"]


def eager_only(name: str, fn: Impl, backend: str, errors: tuple[type[Exception], ...], match: str = "") -> Impl:
    """``fn`` raising :class:`~mithril.errors.UnsupportedPrimitiveError` (naming the primitive, the backend
    and the way out) where the framework's tracer cannot give a value known only at run time (``errors``:
    what the framework raises then, with ``match`` in its message).

    >>> import numpy as np
    >>> eager_only("item", item, "NumpyBackend", (ValueError,))(np.array([1.5]))
    1.5
    """

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except errors as exc:
            if match not in str(exc):
                raise
            raise UnsupportedPrimitiveError(
                f"primitive {name!r} on {backend}: its result depends on values known only at run time, which "
                f"the JIT cannot trace; compile with jit=False ({type(exc).__name__})"
            ) from None

    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"``{name}`` outside the JIT (refused with a clear error inside it)."
    return run


def item(input: Any) -> Any:
    """``input.item()``: the one element as a Python number.

    >>> import numpy as np
    >>> item(np.array([[2.5]]))
    2.5
    """
    return input.item()


def to_list(*inputs: Any, n: int) -> list[Any]:
    """``[input_0, ..., input_(n-1)]``

    >>> to_list(1, 2, n=2)
    [1, 2]
    """
    return list(inputs)


def to_tuple(*inputs: Any, n: int) -> tuple[Any, ...]:
    """``(input_0, ..., input_(n-1))``

    >>> to_tuple(1, 2, n=2)
    (1, 2)
    """
    return inputs


def build(b: Binding) -> dict[str, Impl]:
    """The implementations bound to ``b.xp`` (``unique`` only where the namespace has it)."""
    xp = b.xp
    table: dict[str, Impl] = {"at_least_1d": xp.atleast_1d, "item": item, "to_list": to_list, "to_tuple": to_tuple}
    unique = getattr(xp, "unique", None)
    if unique is not None:
        table["unique"] = unique
    return table
