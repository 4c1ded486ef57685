"""Entry point of the C backend (``[project.entry-points.mithril] c``): the backend class and its
emitter table as lazy ``"module:attr"`` targets, so loading the plugin imports nothing heavy."""

from mithril.extend import backend_plugin

BACKEND, OPS = "mithril_backend_c.backend:CBackend", "mithril_backend_c.emitters:TABLE"
mithril_register_backends, mithril_register_impls = backend_plugin("c", BACKEND, OPS, ("CBackend",))
