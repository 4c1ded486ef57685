"""Parallelism: sharding plans over a backend's device mesh (see :mod:`mithril.parallel.plan`).

Backends with a ``device_mesh`` (JAX: ``jax.sharding``; PyTorch: ``torch.distributed``) place arrays
per a plan; ``ml.compile(..., parallelism=...)`` builds the plan.

Example:
    >>> from mithril.parallel import mesh_axis_names
    >>> mesh_axis_names(1)
    ('mesh_0',)
"""

from .plan import (
    MODES,
    ShardingPlan,
    Spec,
    indivisible_dimension,
    make_plan,
    mesh_axis_names,
    mesh_sizes,
    normalise_spec,
    parameter_bytes_per_device,
)

__all__ = [
    "MODES", "ShardingPlan", "Spec", "indivisible_dimension", "make_plan", "mesh_axis_names", "mesh_sizes",
    "normalise_spec", "parameter_bytes_per_device",
]  # fmt: skip
