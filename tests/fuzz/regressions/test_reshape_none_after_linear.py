"""Fuzz reproduction: c (float64), ggml (float32).

Fixed (shape inference, mithril-core): reshape(shape=(3, 1, None, 1)) of a linear output [1, 3, 1]
(None: keep the input's size on that axis) left the output shape unresolved: once linear's variadic
output was resolved its dims sat in the suffix, and the reshape rule only read the prefix for None
entries. C and GGML, which need static shapes, refused to compile. Found by the quick profile (200 C
models) inside a 35-call model, reduced by hand.
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('linear')(input='x0', weight='x1', bias=None, output=IOKey("v0", expose=False))
    model |= Primitive('reshape', shape=(3, 1, None, 1))(input='v0', output=IOKey("v1"))
    return model


test_reshape_none_after_linear = reproduction_test(build_model,
    backend=["c", "ggml"],
    params={"x0": [[[0.5, 0.25], [-1.0, 1.5], [2.0, -0.75]]], "x1": [[1.5, -0.5]]},
    cotangents={"v1": [[[[0.1257302165031433]]], [[[-0.13210485875606537]]], [[[0.6404226422309875]]]]},
    expected={"v1": [[[[0.625]]], [[[-2.25]]], [[[3.375]]]]},
    expected_gradients={"x0": [[[0.18859532469051032, -0.06286510823017011], [-0.1981572881337712, 0.06605242930390887],
        [0.9606339632650673, -0.3202113210143409]]], "x1": [[1.4758152513394407, -0.6470417157622421]]},
    tolerance={"float64": {"v1": (1.5e-10, 5.0625e-12)}, "float32": {"v1": (1.5000000000000002e-05,
        5.0625000000000004e-05)}},
    gradient_tolerance={"float64": {"x0": (1.5e-06, 1.5088817841970012e-07), "x1": (1.5e-06, 2.2226046612061622e-07)},
        "float32": {"x0": (0.0015, 0.00015000088817841971), "x1": (0.0015, 0.00022137317587933583)}},
)
