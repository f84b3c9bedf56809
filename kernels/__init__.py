"""``nki.kernels``: a library of NKI kernels written in the current API, each with a torch or
numpy reference beside it."""
