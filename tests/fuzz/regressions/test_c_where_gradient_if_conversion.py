"""Fuzz reproduction (C campaign): c (float64): fixed (generated C is compiled with
``-fno-tree-loop-if-convert`` where the compiler accepts it).

c (float64), variant 'default' (all passes on): gradient
gradient of 'x0': 3 of 18 entries off (finite differences)
    worst at flat index 14: got np.float64(0.0), expected np.float64(-1.2970567944137201)
        (|diff| 1.3; allowed atol 2.36e-07 + rtol 1.5e-06 * |expected|)

The backward's fused ``e5 ? 0.0 : g[i]`` (``where``'s gradient of its right operand, beside the forward's
``e5 ? x1[j] : x0[i]`` with ``x1`` broadcast) is miscompiled by GCC 12.2 at ``-O3`` with AVX2 even with
every operand loaded into a local first: 5 of 18 entries wrong in a standalone C program, right at
``-O2``, with ``-fno-tree-vectorize`` or with ``-fno-tree-loop-if-convert``. The float64 backends run it too.
"""

from mithril.models import IOKey, Model, Primitive
from mithril_testing.fuzz.replay import reproduction_test


def build_model():
    model = Model()
    model |= Primitive('greater')(left=-1.5, right='x0', output=IOKey("v0", expose=False))
    model |= Primitive('where')(condition='v0', left='x1', right='x0', output=IOKey("v1"))
    return model


test_c_where_gradient_if_conversion = reproduction_test(build_model,
    backend=["c", "numpy", "jax", "torch"],
    data_keys=["x1"],
    params={"x0": [[[[0.4110318720340729, 1.15387761592865, -3.666411876678467]],
            [[3.7503535747528076, 2.6236019134521484, -4.907782077789307]], [[6.352585792541504, 0.6709514260292053,
            3.145402193069458]]], [[[6.104682445526123, 4.752756118774414, 0.3775727152824402]],
            [[-1.870391845703125, -1.6566523313522339, -0.4895229935646057]],
            [[-7.208144664764404, -4.484638690948486, -5.45798397064209]]]]},
    data={"x1": [[[-0.37052732706069946, 0.36735111474990845, 0.04192600026726723]]]},
    cotangents={"v1": [[[[0.5671648383140564, -0.5106316208839417, -1.5353630781173706]],
            [[-1.5743801593780518, -0.29102790355682373, -0.5896843075752258]],
            [[0.8546708822250366, 0.2673390507698059, 1.3726571798324585]]], [[[0.22851522266864777, 0.7191293239593506,
            0.12166931480169296]], [[-0.30417734384536743, 0.021900448948144913, -1.297056794166565]],
            [[0.006731241010129452, 0.8732830882072449, 0.408740758895874]]]]},
    expected={"v1": [[[[0.4110318720340729, 1.15387761592865, 0.04192600026726723]],
            [[3.7503535747528076, 2.6236019134521484, 0.04192600026726723]], [[6.352585792541504, 0.6709514260292053,
            3.145402193069458]]], [[[6.104682445526123, 4.752756118774414, 0.3775727152824402]],
            [[-0.37052732706069946, 0.36735111474990845, -0.4895229935646057]],
            [[-0.37052732706069946, 0.36735111474990845, 0.04192600026726723]]]]},
    expected_gradients={"x0": [[[[0.5671648395377815, -0.5106316205427675, 0.0]],
            [[-1.5743801586864947, -0.2910279022216855, 0.0]], [[0.8546708833989669, 0.26733905045261963,
            1.3726571808092558]]], [[[0.2285152227443632, 0.7191293249775299, 0.12166931462331831]],
            [[0.0, 0.0, -1.2970567944137201]], [[0.0, 0.0, 0.0]]]]},
    tolerance={"v1": (1.5e-10, 9.528878688812257e-12)},
    gradient_tolerance={"x0": (1.5e-06, 2.4326245116057523e-07)},
)
