"""The compiler: flatten, classify, optimise, differentiate and generate code (see :func:`compile`)."""
