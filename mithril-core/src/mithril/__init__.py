"""Mithril: compose a model once, compile it for NumPy, JAX, PyTorch, MLX, C or GGML."""
