"""The runtime: what ``ml.compile`` returns and how its calls run.

- :mod:`.physical`: :class:`PhysicalModel`, the public face of the parts below.
- :mod:`.records`: the typed records ``ml.compile`` builds it from (the program's signature, how it runs,
  where it came from).
- :mod:`.runner`: ``evaluate``'s calls (outputs and gradients) on the backend.
- :mod:`.input_checks`: the validation every call's inputs go through, and the fast path that may skip it.
- :mod:`.persistence`: the current parameters, parameter files, the standalone program export, lowered text.
- :mod:`.training`: ``init_state`` and ``train_step`` of a model compiled with ``optimizer=``.

The compiler (:mod:`mithril.compiler`) produces the program; nothing here changes it.
"""

from .physical import PhysicalModel
from .records import CompileReport, ProgramSignature, RunSettings

__all__ = ["CompileReport", "PhysicalModel", "ProgramSignature", "RunSettings"]
