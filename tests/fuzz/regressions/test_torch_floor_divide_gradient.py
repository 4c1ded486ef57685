"""Fuzz reproduction: torch (float64).

Known bug (mithril-backend-torch): floor_divide of trainable float inputs. The spec declares no input
differentiable (gradient zero, as NumPy/C/GGML give); PyTorch autograd raises 'derivative for
aten::floor_divide is not implemented'.
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('floor_divide')(left='x0', right='x1', output=IOKey("v0", expose=False))
    model |= Primitive('multiply')(left='v0', right='x0', output=IOKey("v1"))
    return model


test_torch_floor_divide_gradient = reproduction_test(build_model,
    backend="torch",
    params={"x0": [0.75, -1.25], "x1": [0.5, 0.5]},
    cotangents={"v1": [0.1257302165031433, -0.13210485875606537]},
    expected={"v1": [0.75, 3.75]},
    expected_gradients={"x0": [0.12573021651585137, 0.39631457621203126], "x1": [0.0, 0.0]},
    tolerance={"v1": (1.5e-10, 5.625e-12)},
    gradient_tolerance={"x0": (1.5e-06, 1.5022204460492502e-07), "x1": (1.5e-06, 1.5e-07)},
)
