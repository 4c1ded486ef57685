"""Fuzz reproduction: jax (float64), torch (float64), mlx (float32).

Known bug (mithril-backend-jax, -torch, -mlx): binary_cross_entropy declares only 'input'
differentiable, so a target computed from a parameter gets no gradient through the target
(NumPy/C/GGML); the autograd backends differentiate through it anyway (they need a stop_gradient at
non-differentiable inputs).
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('sigmoid')(input='x0', output=IOKey("v0", expose=False))
    model |= Primitive('binary_cross_entropy', input_type='logits')(input='x0', target='v0', output=IOKey("v1"))
    return model


test_nondifferentiable_target = reproduction_test(build_model,
    backend=["jax", "torch", "mlx"],
    params={"x0": [0.5, -1.0]},
    cotangents={"v1": [0.1257302165031433, -0.13210485875606537]},
    expected={"v1": [0.6628473185791794, 0.582203108888218]},
    expected_gradients={"x0": [0.0, -6.938893903907228e-12]},
    tolerance={"float64": {"v1": (1.5e-10, 1.5011347788604907e-12)}, "float32": {"v1": (1.5000000000000002e-05,
        1.5609229761749932e-05)}},
    gradient_tolerance={"float64": {"x0": (1.5e-06, 1.5002775557561562e-07)},
        "float32": {"x0": (0.0015, 0.00015000002775557563)}},
)
