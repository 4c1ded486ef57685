"""Symmetric-matrix factorisations (``cholesky``, ``eigvalsh``) and the helpers their gradients emit on
manual-gradient backends (``cholesky_grad``, ``eigvalsh_grad``; autograd backends derive those from
their ``vjp``). Everything is batched over leading axes and reads only the lower triangle of the input.

A namespace without ``linalg.cholesky`` / ``linalg.eigh`` gets none of them (the backend then lacks the
primitive and says so when a model needs it).

Example:
    >>> import numpy as np
    >>> from mithril.backends.array_api import Binding
    >>> table = build(Binding(np, {}))
    >>> table["cholesky"](np.array([[4.0, 2.0], [2.0, 2.0]])).tolist()
    [[2.0, 0.0], [1.0, 1.0]]
    >>> table["eigvalsh_grad"](np.array([1.0, 1.0]), np.eye(2)).tolist()   # V diag(1) V^T = I
    [[1.0, 0.0], [0.0, 1.0]]
"""

from __future__ import annotations

from typing import Any

from ...primitives.shape_rules import broadcast_sum_axes
from ._binding import Binding, Impl

__all__ = ["build"]


def build(b: Binding) -> dict[str, Impl]:
    """The linear-algebra implementations bound to ``b.xp`` (those its ``linalg`` namespace can express)."""
    xp = b.xp
    linalg = getattr(xp, "linalg", None)
    cholesky_ = b.pick("cholesky", getattr(linalg, "cholesky", None))
    eigh, eigvalsh_ = getattr(linalg, "eigh", None), getattr(linalg, "eigvalsh", None)
    solve, swapaxes, tril = getattr(linalg, "solve", None), xp.swapaxes, getattr(xp, "tril", None)
    table: dict[str, Impl] = _matmul_grads(xp)
    if cholesky_ is not None:
        table["cholesky"] = cholesky_
        if solve is not None and tril is not None:

            def cholesky_grad(output_grad: Any, input: Any) -> Any:
                """``sym(L^-T Phi(L^T tril(output_grad)) L^-1)``, ``Phi`` = lower triangle with the diagonal halved."""
                factor = cholesky_(input)
                upper = swapaxes(factor, -1, -2)
                product = upper @ tril(output_grad)
                phi = 0.5 * (tril(product) + tril(product, -1))  # strict lower triangle + half the diagonal
                left = solve(upper, phi)  # L^-T Phi
                both = swapaxes(solve(upper, swapaxes(left, -1, -2)), -1, -2)  # (L^-T (L^-T Phi)^T)^T = L^-T Phi L^-1
                return 0.5 * (both + swapaxes(both, -1, -2))

            table["cholesky_grad"] = cholesky_grad
    if eigvalsh_ is not None:
        table["eigvalsh"] = eigvalsh_
    if eigh is not None:

        def eigvalsh_grad(output_grad: Any, input: Any) -> Any:
            """``V @ diag(output_grad) @ V^T`` with ``V`` the eigenvectors of ``input``."""
            _, vectors = eigh(input)
            return (vectors * output_grad[..., None, :]) @ swapaxes(vectors, -1, -2)

        table["eigvalsh_grad"] = eigvalsh_grad
    return table


def _matmul_grads(xp: Any) -> dict[str, Impl]:
    """``matmul_grad_left`` / ``matmul_grad_right``: the matmul VJP for operands whose rank was unknown at
    compile time (NumPy's 1-D promotion and batch broadcasting decided here, per call)."""
    expand_dims, reshape = getattr(xp, "expand_dims", None), getattr(xp, "reshape", None)
    swapaxes, sum_ = getattr(xp, "swapaxes", None), getattr(xp, "sum", None)
    if expand_dims is None or reshape is None or swapaxes is None or sum_ is None:
        return {}

    def promoted(output_grad: Any, left: Any, right: Any) -> tuple[Any, Any, Any]:
        """``left`` as ``[..., m, k]``, ``right`` as ``[..., k, n]`` and ``output_grad`` as ``[..., m, n]``."""
        g = output_grad
        if right.ndim == 1:
            right, g = expand_dims(right, -1), expand_dims(g, -1)  # [k] -> [k, 1]; [..., m] -> [..., m, 1]
        if left.ndim == 1:
            left, g = expand_dims(left, 0), expand_dims(g, -2)  # [k] -> [1, k]; [..., n] -> [..., 1, n]
        return g, left, right

    def summed_to(grad: Any, promoted_shape: tuple[int, ...], shape: tuple[int, ...]) -> Any:
        axes = broadcast_sum_axes(tuple(grad.shape), promoted_shape)
        if axes:
            grad = sum_(grad, axis=axes, keepdims=True)
        return reshape(grad, shape)

    def matmul_grad_left(output_grad: Any, left: Any, right: Any) -> Any:
        """``output_grad @ right^T`` summed back to ``left``'s shape (1-D operands promoted as in ``matmul``)."""
        g, l2, r2 = promoted(output_grad, left, right)
        return summed_to(g @ swapaxes(r2, -1, -2), tuple(l2.shape), tuple(left.shape))

    def matmul_grad_right(output_grad: Any, left: Any, right: Any) -> Any:
        """``left^T @ output_grad`` summed back to ``right``'s shape (1-D operands promoted as in ``matmul``)."""
        g, l2, r2 = promoted(output_grad, left, right)
        return summed_to(swapaxes(l2, -1, -2) @ g, tuple(r2.shape), tuple(right.shape))

    return {"matmul_grad_left": matmul_grad_left, "matmul_grad_right": matmul_grad_right}
