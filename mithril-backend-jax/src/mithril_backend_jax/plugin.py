"""Entry point of the JAX backend (``[project.entry-points.mithril] jax``): the backend class and its
op table as lazy ``"module:attr"`` targets, so loading the plugin imports nothing heavy."""

from mithril.extend import backend_plugin

BACKEND, OPS = "mithril_backend_jax.backend:JaxBackend", "mithril_backend_jax.ops:TABLE"
mithril_register_backends, mithril_register_impls = backend_plugin("jax", BACKEND, OPS, ("JaxBackend",))
