"""Fuzz reproduction: mlx (float32).

Fixed (mithril-backend-mlx): two outputs that are the same mx.array after CSE (exp(x) twice) got
one cotangent only: mx.vjp keyed the cotangents by graph node; each output now gets its own node.
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('exp')(input='x0', output=IOKey("v0"))
    model |= Primitive('exp')(input='x0', output=IOKey("v1"))
    return model


test_mlx_duplicate_outputs_gradient = reproduction_test(build_model,
    backend="mlx",
    params={"x0": [0.5, 1.5]},
    cotangents={"v0": [0.1257302165031433, -0.13210485875606537], "v1": [0.6404226422309875, 0.10490011423826218]},
    expected={"v0": [1.6487212707001282, 4.4816890703380645], "v1": [1.6487212707001282, 4.4816890703380645]},
    expected_gradients={"x0": [1.263172514809341, -0.12192320597570472]},
    tolerance={"v0": (1.25e-05, 5.7525916942760364e-05), "v1": (1.25e-05, 5.7525916942760364e-05)},
    gradient_tolerance={"x0": (0.00125, 0.0001578974525295873)},
)
