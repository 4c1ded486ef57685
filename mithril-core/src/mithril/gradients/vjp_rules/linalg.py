"""VJP rules for ``matmul``, ``linear``, ``cholesky`` and ``eigvalsh``.

``cholesky`` and ``eigvalsh`` read only the lower triangle of their (symmetric) input; their gradients are
the symmetric ones (as PyTorch and JAX give), i.e. the gradients of the functions of ``(A + A.T) / 2``.
The math lives in the helper primitives they emit (``cholesky_grad``, ``eigvalsh_grad``), which
autograd backends derive from their own ``vjp``.
"""

from __future__ import annotations

from ..context import Cotangents, GradContext
from ._common import wants


def matmul(ctx: GradContext) -> Cotangents:
    """NumPy matmul: a 1-D left operand is a row ``[1, k]``, a 1-D right one a column ``[k, 1]``; batch
    axes broadcast, so each cotangent is summed back to its operand's shape."""
    g, left, right = ctx.cotangent, ctx["left"], ctx["right"]
    ops = ctx.ops
    if left.shape.rank is None or right.shape.rank is None:  # 1-D promotion decided at run time
        grads = {}
        if wants(ctx, "left"):
            grads["left"] = ops.matmul_grad_left(g, left, right)
        if wants(ctx, "right"):
            grads["right"] = ops.matmul_grad_right(g, left, right)
        return grads
    left_1d, right_1d = ctx.rank(left) == 1, ctx.rank(right) == 1
    l2 = ops.unsqueeze(left, axis=0) if left_1d else left  # [k] -> [1, k]
    r2 = ops.unsqueeze(right, axis=-1) if right_1d else right  # [k] -> [k, 1]
    if right_1d:
        g = ops.unsqueeze(g, axis=-1)  # [..., m] -> [..., m, 1]
    if left_1d:
        g = ops.unsqueeze(g, axis=-2)  # [..., n] -> [..., 1, n]
    grads = {}
    if wants(ctx, "left"):
        d = ops.sum_to_like(g @ ops.swapaxes(r2), l2)  # [..., m, n] @ [..., n, k] -> [m, k]-like
        grads["left"] = ops.reshape_like(d, left) if left_1d else d
    if wants(ctx, "right"):
        d = ops.sum_to_like(ops.swapaxes(l2) @ g, r2)  # [..., k, m] @ [..., m, n] -> [k, n]-like
        grads["right"] = ops.reshape_like(d, right) if right_1d else d
    return grads


def linear(ctx: GradContext) -> Cotangents:
    """``y = x @ W.T + b`` with x ``[..., k]``, W ``[d, k]``, b ``[d]``."""
    g = ctx.cotangent
    grads = {}
    if wants(ctx, "input"):
        grads["input"] = g @ ctx["weight"]  # [..., d] @ [d, k] -> [..., k]
    if wants(ctx, "weight"):
        grads["weight"] = ctx.ops.linear_grad_weight(g, ctx["input"])  # [d, k]
    if wants(ctx, "bias"):
        grads["bias"] = ctx.ops.sum_to_like(g, ctx["bias"])  # [d]
    return grads


def cholesky(ctx: GradContext) -> Cotangents:
    """``A = L L^T``: ``dA = sym(L^-T Phi(L^T tril(dL)) L^-1)`` with ``Phi`` the lower triangle, diagonal halved
    (Murray, "Differentiation of the Cholesky decomposition", 2016)."""
    return {"input": ctx.ops.cholesky_grad(ctx.cotangent, ctx["input"])}


def eigvalsh(ctx: GradContext) -> Cotangents:
    """``A = V diag(w) V^T``: ``dA = V diag(dw) V^T`` (distinct eigenvalues)."""
    return {"input": ctx.ops.eigvalsh_grad(ctx.cotangent, ctx["input"])}


RULES = {"matmul": matmul, "linear": linear, "cholesky": cholesky, "eigvalsh": eigvalsh}
