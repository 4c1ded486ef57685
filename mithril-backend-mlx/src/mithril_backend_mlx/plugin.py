"""Entry point of the MLX backend (``[project.entry-points.mithril] mlx``): the backend class and its
op table as lazy ``"module:attr"`` targets, so loading the plugin imports nothing heavy."""

from mithril.extend import backend_plugin

BACKEND, OPS = "mithril_backend_mlx.backend:MlxBackend", "mithril_backend_mlx.ops:TABLE"
mithril_register_backends, mithril_register_impls = backend_plugin("mlx", BACKEND, OPS, ("MlxBackend", "MLXBackend"))
