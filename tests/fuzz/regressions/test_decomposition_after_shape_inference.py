"""Fuzz reproduction: c (float64), ggml (float32): fixed (the decomposition pass solves the shapes first).

c (float64), variant 'default' (all passes on): compile-error
UnsupportedPrimitiveError: lstm_recurrence: its decomposition (for backends without the primitive) unrolls
the steps, so it needs the sequence length and hidden size at compile time; ... given (2, None, 4) and (4, 1)

The sequence length of ``lstm_recurrence``'s input comes from broadcasting ``where``'s operands, which shape
inference had not run yet when ``ml.compile`` spliced in the decomposition (C and GGML have no
``lstm_recurrence``). The backends that implement it are checked on the same numbers.
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('where')(condition=IOKey("x0", type="bool"), left='x1', right='x2',
        output=IOKey("v0", expose=False))
    model |= Primitive('lstm_recurrence')(input='v0', weight_hh='x3', initial_hidden=IOKey("x4", shape=[2, 1]),
        initial_cell='x5', output=IOKey("v1"), hidden=IOKey("v2", expose=False), cell=IOKey("v3", expose=False))
    return model


test_decomposition_after_shape_inference = reproduction_test(build_model,
    backend=["c", "ggml", "numpy", "jax", "torch", "mlx"],
    shapes={"x1": [], "x2": [2, 1, 1], "x3": [4, 1], "x5": [2, 1]},
    constant_keys={"x0": [[False, False, True, False], [False, True, False, False]]},
    params={"x1": 1.2523142099380493,
        "x2": [[[0.16734671592712402]], [[0.02935662493109703]]],
        "x3": [[0.9672079682350159], [1.014675259590149], [-0.139277845621109], [-1.5850999355316162]],
        "x4": [[1.4334698915481567], [0.2359982579946518]],
        "x5": [[-0.6000024080276489], [1.1250474452972412]]},
    cotangents={"v1": [[[-0.7958919405937195], [1.8393707275390625]], [[-0.502322793006897], [-0.479981929063797]]]},
    expected={"v1": [[[0.015659825343139262], [0.1070384184592335]], [[0.3335893592723858], [0.2729091664310159]]]},
    expected_gradients={"x1": 0.19236707336778291,
        "x2": [[[0.6378536070578145]], [[-0.2676122478895149]]],
        "x3": [[0.09751197074803208], [-0.08793134595452834], [0.2777520592411875], [-0.06225017123995258]],
        "x4": [[0.00873076329288569], [0.05921017287580099]],
        "x5": [[0.5319957088190108], [-0.07224898532220969]]},
    tolerance={"float64": {"v1": (1.5e-10, 1.5009478517584854e-12)}, "float32": {"v1": (1.5000000000000002e-05,
        1.5508874038018805e-05)}},
    gradient_tolerance={"float64": {"x1": (1.5e-06, 1.5027755575615628e-07), "x2": (1.5e-06, 1.5008326672684688e-07),
            "x3": (1.5e-06, 1.5023592239273284e-07), "x4": (1.5e-06, 1.5005551115123125e-07),
            "x5": (1.5e-06, 1.501110223024625e-07)},
        "float32": {"x1": (0.0015, 0.00015000027755575617), "x2": (0.0015, 0.00015000008326672686),
            "x3": (0.0015, 0.00015000023592239275), "x4": (0.0015, 0.00015000005551115125),
            "x5": (0.0015, 0.00015000011102230248)}},
)
