"""The MLX op table: one function per primitive, named after it, collected from the family modules
(the same modules and names as every other backend).

Example:
    >>> from mithril_backend_mlx import ops
    >>> "conv2d" in ops.__all__
    True
"""

from . import elementwise, gradient_helpers, linalg, losses, nn, reductions, shape_ops

_MODULES = (elementwise, linalg, reductions, shape_ops, nn, losses, gradient_helpers)

globals().update({name: getattr(module, name) for module in _MODULES for name in module.__all__})

__all__ = [name for module in _MODULES for name in module.__all__]  # pyright: ignore[reportUnsupportedDunderAll]
