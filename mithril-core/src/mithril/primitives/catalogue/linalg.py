"""Matrix multiplication, the fused ``linear`` layer and the symmetric-matrix factorisations ``cholesky``
and ``eigvalsh``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...shapes import Dim, Shape, ShapeMismatch, unify, unify_dims
from ..shape_rules import broadcast_dims, float_result, promote, template
from ..spec import PrimitiveSpec, ShapeIO


def _matmul_shape(io: ShapeIO, attrs: Mapping[str, Any]) -> bool:
    """``[..., m, k] @ [..., k, n] -> [..., m, n]`` with NumPy's 1-D promotion rules."""
    left, right, out = io["left"], io["right"], io["output"]
    ld, rd = left.dims(), right.dims()
    if ld is not None and rd is not None:
        if not ld or not rd:
            raise ShapeMismatch("matmul needs inputs of rank >= 1")
        if len(ld) == 1 and len(rd) == 1:
            unify_dims(ld[0], rd[0])
            unify(out, Shape())
            return True
        if len(rd) == 1:
            unify_dims(ld[-1], rd[0])
            unify(out, Shape(ld[:-1]))
            return True
        if len(ld) == 1:
            unify_dims(ld[0], rd[-2])
            unify(out, Shape([*rd[:-2], rd[-1]]))
            return True
        unify_dims(ld[-1], rd[-2])
        batch = broadcast_dims([ld[:-2], rd[:-2]])
        if batch is None:
            unify(out, Shape([Dim() for _ in range(max(len(ld), len(rd)) - 2)] + [ld[-2], rd[-1]]))
            return False
        unify(out, Shape([*batch, ld[-2], rd[-1]]))
        return True
    if rd is not None and len(rd) == 2:  # [..., m, k] @ [k, n] -> [..., m, n]
        template(left=[("B", ...), "k"], right=["k", "n"], output=[("B", ...), "n"])(io, attrs)
        return True
    return False


SPECS = (
    PrimitiveSpec("matmul", ("left", "right"), _matmul_shape, promote, doc="np.matmul(left, right)"),
    PrimitiveSpec(
        "linear",
        ("input", "weight", "bias"),
        template(input=[("B", ...), "k"], weight=["d", "k"], bias=["d"], output=[("B", ...), "d"]),
        promote,
        optional_inputs=frozenset({"bias"}),
        doc="input @ weight.T + bias (PyTorch layout: weight is [out, in]); bias may be None",
    ),
    PrimitiveSpec(
        "cholesky",
        ("input",),
        template(input=[("B", ...), "n", "n"], output=[("B", ...), "n", "n"]),
        float_result,
        doc="np.linalg.cholesky(input): lower-triangular L with L @ L.T == input (symmetric positive definite, "
        "batched over leading axes; only the lower triangle of input is read)",
    ),
    PrimitiveSpec(
        "eigvalsh",
        ("input",),
        template(input=[("B", ...), "n", "n"], output=[("B", ...), "n"]),
        float_result,
        doc="np.linalg.eigvalsh(input): eigenvalues of a symmetric matrix in ascending order (batched; only the "
        "lower triangle of input is read)",
    ),
)
