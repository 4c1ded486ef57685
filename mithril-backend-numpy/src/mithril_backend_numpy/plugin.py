"""Entry point of the NumPy backend (``[project.entry-points.mithril] numpy``): the backend class and its
op table as lazy ``"module:attr"`` targets, so loading the plugin imports nothing heavy."""

from mithril.extend import backend_plugin

BACKEND, OPS = "mithril_backend_numpy.backend:NumpyBackend", "mithril_backend_numpy.ops:TABLE"
mithril_register_backends, mithril_register_impls = backend_plugin("numpy", BACKEND, OPS, ("NumpyBackend",))
