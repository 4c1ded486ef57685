"""Fuzz reproduction: numpy (float64), torch (float64), jax (float64), mlx (float32), c (float64), ggml (float32).

Fixed: the gradient of binary_cross_entropy(input_type="logits") at an input of exactly 0 was wrong on
JAX and MLX (x0[0, 0] got -0.063 instead of 0 in the campaign's model, where x - max_pool2d_grad(x) gave
exact zeros): the shared array-API implementation computed max(x, 0) - x t + log1p(exp(-|x|)), which is
smooth, but autodiff differentiates max and abs at their kinks (JAX: 1/2 and 1, MLX: 0 and 0), and the
two do not cancel at 0. Now softplus(x) - x t (logaddexp(x, 0)), whose autodiff gradient is sigmoid(x) - t
everywhere (as PyTorch's implementation and NumPy's gradient rule).
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('binary_cross_entropy', input_type='logits')(input='x0', target='x1', output=IOKey("v0"))
    return model


test_binary_cross_entropy_logits_gradient_at_zero = reproduction_test(build_model,
    backend=["numpy", "torch", "jax", "mlx", "c", "ggml"],
    data_keys=["x1"],
    params={"x0": [[0.0, -0.125], [0.25, -0.0]]},
    data={"x1": [[0.5, 0.375], [0.625, 0.25]]},
    cotangents={"v0": [[0.1257302165031433, -0.13210485875606537], [0.6404226422309875, 0.10490011423826218]]},
    expected={"v0": [[0.6931471805599453, 0.679474035317169], [0.6696894198788436, 0.6931471805599453]]},
    expected_gradients={"x0": [[0.0, -0.012390197479117404], [-0.04023359126414938, 0.02622502856541864]]},
    tolerance={"float64": {"v0": (1.25e-10, 1.2506094542246064e-12)}, "float32": {"v0": (1.25e-05,
        1.282719824538674e-05)}},
    gradient_tolerance={"float64": {"x0": (1.2499999999999999e-06, 1.2516653345369377e-07)},
        "float32": {"x0": (0.00125, 0.0001250001665334537)}},
)
