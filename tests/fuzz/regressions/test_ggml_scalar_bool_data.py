"""Fuzz reproduction: ggml (float32).

Fixed: a 0-d bool data array was refused ("has shape (1,), expected ()"): converting it to the
input's dtype with np.ascontiguousarray made it 1-d.
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('where')(condition=IOKey("x1", type="bool"), left='x0', right=0.0, output=IOKey("v0"))
    return model


test_ggml_scalar_bool_data = reproduction_test(build_model,
    backend="ggml",
    data_keys=["x1"],
    params={"x0": [0.5, 1.5]},
    data={"x1": True},
    cotangents={"v0": [0.1257302165031433, -0.13210485875606537]},
    expected={"v0": [0.5, 1.5]},
    expected_gradients={"x0": [0.12573021651585137, -0.1321048587465956]},
    tolerance={"v0": (1.25e-05, 1.8750000000000002e-05)},
    gradient_tolerance={"x0": (0.00125, 0.00012500005551115123)},
)
