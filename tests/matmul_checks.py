"""A check shared by the kernel tests: a matmul over every leading and trailing slice of a
token batch (1-9, 16 and 17 tokens: each direct, grouped and remainder path) gives exactly the
reference's rows."""
import numpy as np

TOKEN_COUNTS = list(range(1, 10)) + [16, 17]


def assert_token_slices_exact(w, x, want):
    from pyllama.backend.cpu import matmul as mm      # the compiled kernels, at use
    assert np.array_equal(mm.matmul(w, x), want)
    n_all = len(x)
    for n in TOKEN_COUNTS:
        assert np.array_equal(mm.matmul(w, x[:n]), want[:n]), n
        assert np.array_equal(mm.matmul(w, x[n_all - n:]), want[n_all - n:]), n
