"""Fuzz reproduction: lifecycle step 'threads' (a model compiled in one thread, first called from 4 others).

Fixed: on MLX, a model with a constant-folded value could only be evaluated in the thread that compiled it:
"RuntimeError: There is no Stream(cpu, 0) in current thread." MLX is lazy, and constant folding (at
compile time) left neg(x0) an unevaluated array bound to the compiling thread's stream; the first thread
to evaluate it was another. The MLX backend now evaluates each folded value when it folds it.
(Found by the lifecycle profile's campaign as a threads:forward disagreement with outputs shifted by
one key on a 21-call model, and reduced to this.)
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('neg')(input='x0', output=IOKey("v0"))
    return model


test_folded_constant_evaluated_in_another_thread = reproduction_test(build_model,
    backend=["numpy", "torch", "jax", "mlx", "c", "ggml"],
    lifecycle="threads",
    constant_keys={"x0": [0.5, -1.5]},
    expected={"v0": [-0.5, 1.5]},
    tolerance={"v0": (1.25e-05, 1.8750000000000002e-05)},
    second=dict(
        expected={"v0": [-0.5, 1.5]},
        tolerance={"v0": (1.25e-05, 1.8750000000000002e-05)},
    ),
)
