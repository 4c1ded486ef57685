"""Generic VJP rules, one module per primitive family. ``ALL_RULES`` maps primitive name -> rule."""

ALL_RULES: dict = {}
