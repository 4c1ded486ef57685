"""Fuzz reproduction: mlx (float32): fixed (stop_gradient now guards int and bool values at every key of a
consumer with a float output, differentiable ones included).

Found as a 28-call chain ending in ``multiply(cast(v, int), v)``: MLX pulled the product's cotangent back
through ``astype(int)`` as an integer (truncated) array and added it to ``x``'s gradient (-0.274 where every
other backend and finite differences give 0). Minimal form: ``y = int(x) * x`` has gradient ``int(x)``; MLX
gave ``int(x) + int(x * cotangent)``.
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('cast', dtype='int')(input='x0', output=IOKey("v0", expose=False))
    model |= Primitive('multiply')(left='v0', right='x0', output=IOKey("v1"))
    return model


test_mlx_int_cast_gradient = reproduction_test(build_model,
    backend=["mlx", "jax", "torch", "numpy"],
    jit=False,
    params={"x0": [2.5, -3.25, 0.5]},
    cotangents={"v1": [1.0, 1.0, 1.0]},
    expected={"v1": [5.0, 9.75, 0.0]},
    expected_gradients={"x0": [2.0, -3.0, 0.0]},
    tolerance={"v1": (1e-06, 1e-06)},
    gradient_tolerance={"x0": (1e-06, 1e-06)},
)
