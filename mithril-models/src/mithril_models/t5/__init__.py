"""T5 for Mithril: the encoder (:func:`t5_encode`) and the decoder with its LM head (:func:`t5_decode`),
built from a ``transformers.T5Config`` (or a dict with its field names) and loadable from Hugging Face
``T5ForConditionalGeneration`` / ``T5EncoderModel`` checkpoints with :func:`mithril_models.load_hf`.

Example:
    >>> import mithril as ml
    >>> config = {"vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4}
    >>> encoder, decoder = t5_encode(config), t5_decode(config)
    >>> enc = ml.compile(encoder, ml.NumpyBackend(), data_keys={"input"})                # doctest: +SKIP
    >>> states = enc.evaluate(enc.randomize_params(), {"input": ids})["output"]          # doctest: +SKIP
"""

from .config import T5Settings
from .model import T5Decoder, T5Encoder, from_hf_config, t5_decode, t5_encode
from .position_bias import RelativePositionBias, relative_position_bucket, relative_position_buckets

__all__ = [
    "RelativePositionBias",
    "T5Decoder",
    "T5Encoder",
    "T5Settings",
    "from_hf_config",
    "relative_position_bucket",
    "relative_position_buckets",
    "t5_decode",
    "t5_encode",
]
