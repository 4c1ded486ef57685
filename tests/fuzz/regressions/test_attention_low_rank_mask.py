"""Fuzz reproduction: torch (float64): fixed (masks of rank 0 or 1 take the composed attention path).

torch (float64), variant 'default' (all passes on): evaluate-error
IndexError: Dimension specified as -2 but tensor has no dimensions (in mithril_backend_torch/ops/nn.py):
``F.scaled_dot_product_attention`` refuses an ``attn_mask`` of rank 0 or 1, which broadcasts like any
other operand everywhere else. Checked with a scalar and a rank-1 float mask.
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('scaled_dot_product_attention', causal=False)(query='x0', key='x1', value='x1', mask='x2',
        output=IOKey("v0"))
    return model


def build_vector_mask_model():
    model = Model()
    model |= Primitive('scaled_dot_product_attention', causal=False)(query='x0', key='x1', value='x1', mask='m',
        output=IOKey("v0"))
    return model


test_attention_scalar_float_mask = reproduction_test(build_model,
    backend=["torch", "jax", "mlx", "numpy", "c", "ggml"],
    params={"x0": [[[[0.1257302165031433], [-0.13210485875606537]]]], "x1": [[[[0.1257302165031433]]]],
        "x2": 0.5478467345237732},
    cotangents={"v0": [[[[0.1257302165031433], [-0.13210485875606537]]]]},
    expected={"v0": [[[[0.1257302165031433], [0.1257302165031433]]]]},
    expected_gradients={"x0": [[[[0.0], [0.0]]]], "x1": [[[[-0.006374642255030372]]]], "x2": 0.0},
    tolerance={"v0": (1e-06, 1e-06)},
    gradient_tolerance={"x0": (1e-05, 1e-06), "x1": (1e-05, 1e-06), "x2": (1e-05, 1e-06)},
)

test_attention_rank_one_float_mask = reproduction_test(build_vector_mask_model,
    backend=["torch", "jax", "mlx", "numpy"],
    params={"x0": [[[[1.0], [-1.0]]]], "x1": [[[[0.5], [2.0]]]]},
    data={"m": [0.0, -50.0]},  # the second key weighs e^-50
    cotangents={"v0": [[[[1.0], [1.0]]]]},
    expected={"v0": [[[[0.5], [0.5]]]]},
    expected_gradients={"x0": [[[[0.0], [0.0]]]], "x1": [[[[2.0], [0.0]]]]},
    tolerance={"v0": (1e-06, 1e-06)},
    gradient_tolerance={"x0": (1e-05, 1e-06), "x1": (1e-05, 1e-06)},
)
