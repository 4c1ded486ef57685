"""Fuzz reproduction: numpy (float64).

Fixed: a constant folded to a NumPy float64 scalar (square of a constant_keys value) was written into the
generated Python as its repr, np.float64(4.0), and evaluate raised NameError: name 'np' is not defined.
Generated code now only inlines exact bool/int/float/str literals (mithril.compiler.codegen.python).
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('square')(input='x1', output=IOKey("v0", expose=False))
    model |= Primitive('add')(left='x0', right='v0', output=IOKey("v1"))
    return model


test_python_folded_float64_constant = reproduction_test(build_model,
    backend="numpy",
    constant_keys={"x1": 2.0},
    params={"x0": [0.5, 1.5]},
    cotangents={"v1": [0.1257302165031433, -0.13210485875606537]},
    expected={"v1": [4.5, 5.5]},
    expected_gradients={"x0": [0.12573021657136252, -0.13210485882986234]},
    tolerance={"v1": (1.5e-10, 8.25e-12)},
    gradient_tolerance={"x0": (1.5e-06, 1.5033306690738754e-07)},
)
