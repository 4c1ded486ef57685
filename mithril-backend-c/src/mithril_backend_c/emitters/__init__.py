"""The C emitter table: one function per primitive, named after it, collected from the family modules.

An emitter takes ``(ctx, node)`` and returns the C lines computing the node's outputs (see
:class:`~mithril_backend_c.context.Ctx`). ``lambda`` (a Python callable) has no emitter: it is the C
backend's one declared gap.

Example:
    >>> from mithril_backend_c import emitters
    >>> "conv2d" in emitters.__all__, "lambda" in emitters.__all__
    (True, False)
"""

from . import elementwise, gradient_helpers, linalg, losses, nn, reductions, shape_ops

_MODULES = (elementwise, linalg, reductions, shape_ops, nn, losses, gradient_helpers)

globals().update({name: getattr(module, name) for module in _MODULES for name in module.__all__})

__all__ = [name for module in _MODULES for name in module.__all__]  # pyright: ignore[reportUnsupportedDunderAll]
