"""Fuzz reproduction: numpy (float64), torch (float64).

Fixed: split with sections=1 returns a 1-tuple; the generated Python (and constant folding) took the
tuple itself as the one output (gather then failed: 'tuple' object has no attribute 'ndim'). Code
generation and folding now ask the spec (PrimitiveSpec.returns_tuple).
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('split', sections=1, axis=0)(input='x0', output_0=IOKey("v0", expose=False))
    model |= Primitive('gather', axis=0)(input='v0', index=IOKey("x1", type="int"), output=IOKey("v1"))
    return model


test_split_single_section = reproduction_test(build_model,
    backend=["numpy", "torch"],
    data_keys=["x1"],
    params={"x0": [[0.5, -1.0], [2.0, 0.25]]},
    data={"x1": [[1, 0]]},
    cotangents={"v1": [[0.1257302165031433, -0.13210485875606537]]},
    expected={"v1": [[2.0, -1.0]]},
    expected_gradients={"x0": [[0.0, -0.13210485871884003], [0.12573021651585137, 0.0]]},
    tolerance={"v1": (1.5e-10, 3e-12)},
    gradient_tolerance={"x0": (1.5e-06, 1.5016653345369377e-07)},
)
