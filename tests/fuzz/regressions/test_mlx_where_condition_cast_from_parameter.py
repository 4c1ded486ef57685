"""Fuzz reproduction: mlx (float32): fixed (stop_gradient now also guards bool/int values computed from parameters).

mlx (float32), variant 'default' (all passes on): evaluate-error
with output_gradients: ValueError: [astype] Type of cotangents does not match primal output type.
    (at /work/main/mithril-backend-mlx/src/mithril_backend_mlx/backend.py:271)
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('cast', dtype='bool')(input='x0', output=IOKey("v0", expose=False))
    model |= Primitive('where')(condition='v0', left='x1', right='x2', output=IOKey("v1"))
    return model


test_mlx_where_condition_cast_from_parameter = reproduction_test(build_model,
    backend="mlx",
    jit=False,
    params={"x0": [0.1257302165031433, -0.13210485875606537], "x1": [[[[0.1257302165031433]]],
        [[[-0.13210485875606537]]]], "x2": [[[[0.1257302165031433]]], [[[-0.13210485875606537]]]]},
    cotangents={"v1": [[[[0.1257302165031433, -0.13210485875606537]]], [[[0.6404226422309875, 0.10490011423826218]]]]},
    expected={"v1": [[[[0.1257302165031433, 0.1257302165031433]]], [[[-0.13210485875606537, -0.13210485875606537]]]]},
    expected_gradients={"x0": [0.0, 0.0], "x1": [[[[-0.006374642258499819]]], [[[0.7453227564707676]]]],
        "x2": [[[[0.0]]], [[[0.0]]]]},
    tolerance={"v1": (1.5000000000000002e-05, 1.5000000000000002e-05)},
    gradient_tolerance={"x0": (0.0015, 0.00015000000000000001), "x1": (0.0015, 0.00015000002775557563),
        "x2": (0.0015, 0.00015000000000000001)},
)
