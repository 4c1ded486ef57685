"""Fuzz reproduction: c (float64), ggml (float32).

Fixed (mithril-backend-c; GGML uses the same kernel): index with key=() of a 0-d input crashed the
process (SIGSEGV) in the generated C: ``view_layout`` took the address of the NumPy scalar that ``a[()]``
returns (a copy) as the view's offset. Run in a subprocess so a crash fails this test, not pytest.
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('index', key=())(input='x0', output=IOKey("v0", expose=False))
    model |= Primitive('multiply')(left='v0', right='x0', output=IOKey("v1"))
    return model


test_index_scalar = reproduction_test(build_model,
    backend=["c", "ggml"],
    params={"x0": 0.75},
    cotangents={"v1": 0.1257302165031433},
    expected={"v1": 0.5625},
    expected_gradients={"x0": 0.18859532475989926},
    tolerance={"float64": {"v1": (1.5e-10, 1.5e-12)}, "float32": {"v1": (1.5000000000000002e-05,
        1.5000000000000002e-05)}},
    gradient_tolerance={"float64": {"x0": (1.5e-06, 1.5004163336342344e-07)},
        "float32": {"x0": (0.0015, 0.00015000004163336344)}},
    isolated=True,
)
