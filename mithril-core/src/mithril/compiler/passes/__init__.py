"""Graph passes run by the compiler, in order: decomposition of primitives the backend lacks, integer
promotion, constant folding, CSE, dead-node pruning, and on autograd backends the ``stop_gradient`` of
non-differentiable inputs; last, shape arithmetic that run-time shapes need is folded or placed on the host."""

from .constant_folding import fold_constants
from .cse import eliminate_common_subexpressions
from .decompose import decompose
from .host_values import place_on_host, positions_from_shapes
from .promotion import promote_integer_inputs
from .pruning import prune
from .stop_gradients import insert_stop_gradients

__all__ = ["decompose", "fold_constants", "eliminate_common_subexpressions", "promote_integer_inputs", "prune", "insert_stop_gradients", "place_on_host", "positions_from_shapes"]
