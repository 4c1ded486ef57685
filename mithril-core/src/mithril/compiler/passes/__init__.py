"""Graph passes run by the compiler, in order: decomposition of primitives the backend lacks, integer
promotion, constant folding, CSE, dead-node pruning, and on autograd backends the ``stop_gradient`` of
non-differentiable inputs; last, shape arithmetic that run-time shapes need is folded or placed on the host.

The optimisation passes (constant folding, CSE, pruning) run through :func:`run_pass`, which tests and tools
observe or substitute with :func:`pass_hook` (:mod:`.hooks`)."""

from .constant_folding import fold_constants
from .cse import eliminate_common_subexpressions
from .decompose import decompose
from .hooks import PASS_NAMES, PassHook, pass_hook, run_pass
from .host_values import place_on_host, positions_from_shapes
from .promotion import promote_integer_inputs
from .pruning import prune
from .stop_gradients import insert_stop_gradients

__all__ = [
    "PASS_NAMES", "PassHook", "decompose", "eliminate_common_subexpressions", "fold_constants", "insert_stop_gradients",
    "pass_hook", "place_on_host", "positions_from_shapes", "promote_integer_inputs", "prune", "run_pass",
]  # fmt: skip
