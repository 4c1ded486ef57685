"""Elementwise emitters: one C expression per primitive, broadcast by :meth:`Ctx.map`.

Every primitive here is also in :data:`EXPRESSIONS` (primitive -> ``(ctx, node) -> (inputs, expr)``), which
the fusion pass (:mod:`~mithril_backend_c.fusion`) uses to compute a chain of them in one loop.

Example (what ``add`` emits for float32 ``[3, 4] + [4]``)::

    for (long i1 = 0; i1 < 3; i1++) {
    MT_OMP("omp simd")
    for (long i2 = 0; i2 < 4; i2++) {
        v7[i1 * 4 + i2] = (float)(v3[i1 * 4 + i2] + v5[i2]);
    }}
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mithril.extend import Node, Value

from ..context import Ctx, broadcast_strides, contiguous_strides, float_literal, node_input

__all__ = ["EMITTERS", "EXPRESSIONS"]

Expression = Callable[..., str]
"""``expr(*c_args) -> C expression`` (one argument per input value, in order)."""

Spec = tuple[list[Value], Expression]
"""``(input values, expr)`` of one elementwise node."""



def _math(ctx: Ctx, node: Node) -> str:
    """The C floating type math is done in for this node's output (float32 -> float functions)."""
    ct = ctx.ct(node.output)
    return ct if ct in ("float", "double") else "double"


_VECTOR_FLOAT = {"exp": "mt_exp_f32", "tanh": "mt_tanh_f32"}
"""Float math functions runtime.h computes without a call (so their loops vectorise), within 1.4 ulp."""


def _fn(ctx: Ctx, node: Node, name: str) -> str:
    """The C function computing ``name`` in this node's math type (``tanhf``, ``mt_exp_f32``, ``log``)."""
    if _math(ctx, node) != "float":
        return name
    return _VECTOR_FLOAT.get(name, f"{name}f")


def select(ct: str, c: str, a: str, b: str) -> str:
    """``c ? a : b`` for a result of C type ``ct``, without a branch (``mt_sel_*`` of runtime.h: both
    operands evaluated, the bits of one kept), so the loop holding it vectorises although the generated
    code is compiled without GCC's if-conversion (:func:`~mithril_backend_c.toolchain.flags`). ``c`` must
    have no side effect; write its ``||`` as ``|`` (both sides evaluated, no branch either)."""
    helper = {"float": "mt_sel_f32", "double": "mt_sel_f64"}.get(ct)
    if helper is None:
        return f"({ct})mt_sel_i64({c}, (int64_t)({a}), (int64_t)({b}))"
    return f"{helper}({c}, {a}, {b})"


def _sel(ctx: Ctx, node: Node) -> Callable[[str, str, str], str]:
    """:func:`select` for the C type of ``node``'s output."""
    ct = ctx.ct(node.output)
    return lambda c, a, b: select(ct, c, a, b)


def _unary(ctx: Ctx, node: Node, expr: Expression) -> Spec:
    return [node_input(node, "input")], expr


def _binary(ctx: Ctx, node: Node, expr: Expression) -> Spec:
    return [node_input(node, "left"), node_input(node, "right")], expr


def neg(ctx: Ctx, node: Node) -> Spec:
    return _unary(ctx, node, lambda x: f"-{x}")


def abs(ctx: Ctx, node: Node) -> Spec:
    sel = _sel(ctx, node)
    return _unary(ctx, node, lambda x: sel(f"{x} < 0", f"-{x}", x))


def sign(ctx: Ctx, node: Node) -> Spec:
    sel = _sel(ctx, node)
    return _unary(ctx, node, lambda x: sel(f"{x} > 0", "1", sel(f"{x} < 0", "-1", x)))


def _call(name: str) -> Callable[[Ctx, Node], Spec]:
    def emit(ctx: Ctx, node: Node) -> Spec:
        m, f = _math(ctx, node), _fn(ctx, node, name)
        return _unary(ctx, node, lambda x: f"{f}(({m}){x})")

    emit.__name__ = name
    return emit


exp, log, log1p, sqrt, sin, cos, tanh, erf, floor = (
    _call(n) for n in ("exp", "log", "log1p", "sqrt", "sin", "cos", "tanh", "erf", "floor")
)


def rsqrt(ctx: Ctx, node: Node) -> Spec:
    m, f = _math(ctx, node), _fn(ctx, node, "sqrt")
    return _unary(ctx, node, lambda x: f"({m})1 / {f}(({m}){x})")


def stop_gradient(ctx: Ctx, node: Node) -> Spec:
    """A copy: C has no autograd (no rule sends a gradient through ``stop_gradient``)."""
    return _unary(ctx, node, lambda x: x)


def square(ctx: Ctx, node: Node) -> Spec:
    return _unary(ctx, node, lambda x: f"{x} * {x}")


def sigmoid(ctx: Ctx, node: Node) -> Spec:
    """``mt_sigmoid_*`` of runtime.h: ``1 / (1 + exp(-x))`` for x >= 0, ``exp(x) / (1 + exp(x))`` below."""
    m = _math(ctx, node)
    return _unary(ctx, node, lambda x: f"mt_sigmoid_{'f32' if m == 'float' else 'f64'}(({m}){x})")


def relu(ctx: Ctx, node: Node) -> Spec:
    sel = _sel(ctx, node)
    return _unary(ctx, node, lambda x: sel(f"({x} > 0) | ({x} != {x})", x, "0"))


def leaky_relu(ctx: Ctx, node: Node) -> Spec:
    slope = float_literal(node.attrs["slope"])
    sel = _sel(ctx, node)
    return _unary(ctx, node, lambda x: sel(f"{x} > 0", x, f"{slope} * {x}"))


def gelu(ctx: Ctx, node: Node) -> Spec:
    m = _math(ctx, node)
    if node.attrs["approximate"]:
        t = _fn(ctx, node, "tanh")
        return _unary(
            ctx, node,
            lambda x: f"({m})0.5 * {x} * (1 + {t}(({m})0.7978845608028654 * ({x} + ({m})0.044715 * {x} * {x} * {x})))",
        )  # fmt: skip
    e = _fn(ctx, node, "erf")
    return _unary(ctx, node, lambda x: f"({m})0.5 * {x} * (1 + {e}(({m}){x} * ({m})0.7071067811865476))")


def softplus(ctx: Ctx, node: Node) -> Spec:
    m, e, l1p = _math(ctx, node), _fn(ctx, node, "exp"), _fn(ctx, node, "log1p")

    def expr(x: str) -> str:  # max(x, 0) + log1p(exp(-|x|))
        positive, magnitude = select(m, f"{x} > 0", f"({m}){x}", "0"), select(m, f"{x} < 0", f"-({m}){x}", f"({m}){x}")
        return f"({positive} + {l1p}({e}(-{magnitude})))"

    return _unary(ctx, node, expr)


def isnan(ctx: Ctx, node: Node) -> Spec:
    return _unary(ctx, node, lambda x: f"{x} != {x}")


def nan_to_num(ctx: Ctx, node: Node) -> Spec:
    x = node_input(node, "input")
    if ctx.np_dtype(x).kind != "f":
        return _unary(ctx, node, lambda v: v)
    big = "FLT_MAX" if ctx.ct(x) == "float" else "DBL_MAX"
    nan = float_literal(node.attrs["nan"])
    pos = big if node.attrs["posinf"] is None else float_literal(node.attrs["posinf"])
    neg_ = f"(-{big})" if node.attrs["neginf"] is None else float_literal(node.attrs["neginf"])
    sel = _sel(ctx, node)
    return _unary(
        ctx, node, lambda v: sel(f"{v} != {v}", nan, sel(f"{v} == INFINITY", pos, sel(f"{v} == -INFINITY", neg_, v)))
    )


def logical_not(ctx: Ctx, node: Node) -> Spec:
    return _unary(ctx, node, lambda x: f"!{x}")


def cast(ctx: Ctx, node: Node) -> Spec:
    if ctx.np_dtype(node.output).kind == "b":
        return _unary(ctx, node, lambda x: f"{x} != 0")
    return _unary(ctx, node, lambda x: x)


def add(ctx: Ctx, node: Node) -> Spec:
    if ctx.np_dtype(node.output).kind == "b":
        return _binary(ctx, node, lambda a, b: f"{a} || {b}")
    return _binary(ctx, node, lambda a, b: f"{a} + {b}")


def subtract(ctx: Ctx, node: Node) -> Spec:
    return _binary(ctx, node, lambda a, b: f"{a} - {b}")


def multiply(ctx: Ctx, node: Node) -> Spec:
    if ctx.np_dtype(node.output).kind == "b":
        return _binary(ctx, node, lambda a, b: f"{a} && {b}")
    return _binary(ctx, node, lambda a, b: f"{a} * {b}")


def divide(ctx: Ctx, node: Node) -> Spec:
    m = _math(ctx, node)
    return _binary(ctx, node, lambda a, b: f"({m}){a} / ({m}){b}")


def floor_divide(ctx: Ctx, node: Node) -> Spec:
    if ctx.np_dtype(node.output).kind in "iu":
        return _binary(ctx, node, lambda a, b: f"mt_floordiv_i64({a}, {b})")
    m = _math(ctx, node)
    sfx = "f32" if m == "float" else "f64"
    return _binary(ctx, node, lambda a, b: f"mt_floordiv_{sfx}(({m}){a}, ({m}){b})")  # NumPy's, NaN/inf included


def power(ctx: Ctx, node: Node) -> Spec:
    if ctx.np_dtype(node.output).kind in "iu":
        return _binary(ctx, node, lambda a, b: f"(int64_t)pow((double){a}, (double){b})")
    m, f = _math(ctx, node), _fn(ctx, node, "pow")
    return _binary(ctx, node, lambda a, b: f"{f}(({m}){a}, ({m}){b})")


def minimum(ctx: Ctx, node: Node) -> Spec:
    sel = _sel(ctx, node)
    return _binary(ctx, node, lambda a, b: sel(f"({a} != {a}) | ({a} < {b})", a, b))


def maximum(ctx: Ctx, node: Node) -> Spec:
    sel = _sel(ctx, node)
    return _binary(ctx, node, lambda a, b: sel(f"({a} != {a}) | ({a} > {b})", a, b))


def _compare(op: str, name: str) -> Callable[[Ctx, Node], Spec]:
    def emit(ctx: Ctx, node: Node) -> Spec:
        return _binary(ctx, node, lambda a, b: f"{a} {op} {b}")

    emit.__name__ = name
    return emit


equal = _compare("==", "equal")
not_equal = _compare("!=", "not_equal")
less = _compare("<", "less")
less_equal = _compare("<=", "less_equal")
greater = _compare(">", "greater")
greater_equal = _compare(">=", "greater_equal")


def logical_and(ctx: Ctx, node: Node) -> Spec:
    return _binary(ctx, node, lambda a, b: f"({a} != 0) && ({b} != 0)")


def logical_or(ctx: Ctx, node: Node) -> Spec:
    return _binary(ctx, node, lambda a, b: f"({a} != 0) || ({b} != 0)")


def logical_xor(ctx: Ctx, node: Node) -> Spec:
    return _binary(ctx, node, lambda a, b: f"({a} != 0) != ({b} != 0)")


def where(ctx: Ctx, node: Node) -> Spec:
    ins = [node_input(node, "condition"), node_input(node, "left"), node_input(node, "right")]
    sel = _sel(ctx, node)
    return ins, lambda c, a, b: sel(f"({c}) != 0", a, b)


def _emitter(name: str, spec: Callable[[Ctx, Node], Spec]) -> Callable[[Ctx, Node], list[str]]:
    def emit(ctx: Ctx, node: Node) -> list[str]:
        inputs, expr = spec(ctx, node)
        return ctx.map(node.output, inputs, expr)

    emit.__name__ = emit.__qualname__ = name
    emit.__doc__ = f"``{name}``: :meth:`Ctx.map` of its C expression (see :data:`EXPRESSIONS`)."
    return emit


EXPRESSIONS: dict[str, Callable[[Ctx, Node], Spec]] = {
    spec.__name__: spec
    for spec in (
        neg, abs, sign, exp, log, log1p, sqrt, rsqrt, square, sin, cos, tanh, sigmoid, relu, leaky_relu, gelu,
        softplus, erf, floor, isnan, nan_to_num, logical_not, cast, add, subtract, multiply, divide, floor_divide,
        power, minimum, maximum, equal, not_equal, less, less_equal, greater, greater_equal, logical_and, logical_or,
        logical_xor, where, stop_gradient,
    )
}
"""Primitive -> ``(ctx, node) -> (input values, expr)``: what its emitter maps over the output, e.g.
``EXPRESSIONS["add"](ctx, node)[1]("a", "b") == "a + b"``."""

_ROW_COPY = 16
"""``where`` copies rows when its condition is constant over blocks of at least this many elements."""


def where_rows(ctx: Ctx, node: Node) -> list[str] | None:
    """``where(condition, left, right)`` as whole-row copies when the condition is constant over the trailing
    axes (a KV-cache update: ``where(hit [L, 1], new [B, H, 1, D], past [B, H, L, D])``): each row of the
    output is copied from ``left`` or ``right``, and a row already in place (the output *is* that operand,
    as in an exported program whose cache is updated in place) is not copied at all, so a decode step
    writes one row per cache instead of rewriting every slot. Same values as the elementwise loop;
    ``None`` where it does not apply (rows shorter than 16, strided rows, conversions, split kernels)."""
    cond, left, right = node_input(node, "condition"), node_input(node, "left"), node_input(node, "right")
    out = node.output
    shape = ctx.shape(out)
    if ctx.partitioned or ctx.lit(left) is not None or ctx.lit(right) is not None or not shape:
        return None
    strides = [broadcast_strides(ctx.shape(v), shape) for v in (cond, left, right)]
    axis = len(shape)
    while axis > 0 and strides[0][axis - 1] == 0:
        axis -= 1
    inner = contiguous_strides(shape[axis:])
    row = math.prod(shape[axis:])
    same_type = ctx.ct(left) == ctx.ct(right) == ctx.ct(out)
    if row < _ROW_COPY or not same_type or strides[1][axis:] != inner or strides[2][axis:] != inner:
        return None
    nbytes = row * ctx.np_dtype(out).itemsize
    operands = [(0, contiguous_strides(shape)[:axis]), *((0, s[:axis]) for s in strides)]
    c, a, b, y = ctx.p(cond), ctx.p(left), ctx.p(right), ctx.p(out)

    def body(i: list[str]) -> list[str]:
        return [
            f"if ({c}[{i[1]}]) {{ if ({y} + {i[0]} != {a} + {i[2]}) memcpy({y} + {i[0]}, {a} + {i[2]}, {nbytes}); }}",
            f"else if ({y} + {i[0]} != {b} + {i[3]}) memcpy({y} + {i[0]}, {b} + {i[3]}, {nbytes});",
        ]

    return ctx.loops(shape[:axis], operands, body, simd=False) if axis else None


def _where(ctx: Ctx, node: Node) -> list[str]:
    """``where``: whole-row copies where they apply (:func:`where_rows`), else the elementwise loop."""
    rows = where_rows(ctx, node)
    if rows is not None:
        return rows
    inputs, expr = where(ctx, node)
    return ctx.map(node.output, inputs, expr)


EMITTERS: dict[str, Callable[[Ctx, Node], list[str]]] = {
    **{n: _emitter(n, spec) for n, spec in EXPRESSIONS.items()},
    "where": _where,
}
"""Primitive -> its emitter: :meth:`Ctx.map` of the expression over the output (``where``: row copies
where its condition allows, :func:`where_rows`)."""
