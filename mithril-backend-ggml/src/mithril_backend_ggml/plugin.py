"""Entry point of the GGML backend (``[project.entry-points.mithril] ggml``): the backend class and its
graph-builder table as lazy ``"module:attr"`` targets, so loading the plugin imports nothing heavy."""

from mithril.extend import backend_plugin

BACKEND, OPS = "mithril_backend_ggml.backend:GGMLBackend", "mithril_backend_ggml.ops:BUILDERS"
mithril_register_backends, mithril_register_impls = backend_plugin("ggml", BACKEND, OPS, ("GGMLBackend", "GgmlBackend"))
