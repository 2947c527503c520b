"""Hand-written Triton code shared by the generated kernels."""
