"""Fuzz reproduction: ggml (float32).

Fixed: a 0-d output folded to a constant (square of a constant_keys value) came back with shape (1,):
GGML constants went through np.ascontiguousarray, which makes 0-d arrays 1-d.
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('square')(input='x1', output=IOKey("v0"))
    model |= Primitive('exp')(input='x0', output=IOKey("v1"))
    return model


test_ggml_folded_scalar_output = reproduction_test(build_model,
    backend="ggml",
    constant_keys={"x1": 2.0},
    params={"x0": [0.5, 1.5]},
    cotangents={"v0": 0.1257302165031433, "v1": [-0.13210485875606537, 0.6404226422309875]},
    expected={"v0": 4.0, "v1": [1.6487212707001282, 4.4816890703380645]},
    expected_gradients={"x0": [-0.21780409054095173, 2.8701751559889743]},
    tolerance={"v0": (1.25e-05, 5e-05), "v1": (1.25e-05, 5.7525916942760364e-05)},
    gradient_tolerance={"x0": (0.00125, 0.0003587727826770415)},
)
