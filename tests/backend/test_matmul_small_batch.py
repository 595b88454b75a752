"""Small batches (speculative verification, 2-20 activation rows) take the direct register-group
path for 32-block types and one mat-vec per token or row tiles for the rest: every row count must
give the bits of the same token alone and of the same token inside a large tiled call."""
import numpy as np
import pytest

from pyllama.backend.cpu import matmul as mm
from test_matmul import kernel_threads, ALL, act, rand_weight, weight  # tests/backend is on sys.path

ROWS, K = 19, 512     # 19 rows: a partial row tile; 512: two K super-blocks, 16 32-blocks


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    with kernel_threads(request.param, split_small=True):
        yield request.param


@pytest.mark.parametrize("t", ALL)
def test_every_row_count_bit_exact(t, threads):
    w = weight(t, rand_weight(t, ROWS, K, seed=11))
    x = act(64, K, seed=12)
    x[5] *= 1e-3                          # a row with tiny scales next to large ones
    big = mm.matmul(w, x)                 # 64 rows: tiles through the decoded-row scratch
    single = np.stack([mm.matmul(w, x[i:i + 1])[0] for i in range(21)])
    np.testing.assert_array_equal(single, big[:21])
    for n in range(2, 21):
        for start in (0, 1):
            np.testing.assert_array_equal(mm.matmul(w, x[start:start + n]), big[start:start + n],
                                          err_msg=f"{t.name}: {n} rows from {start}")


@pytest.mark.parametrize("t", ALL)
def test_small_batch_into_strided_out(t):
    """A column slice of a wider buffer as out (the fused QKV layout), 9 rows."""
    w = weight(t, rand_weight(t, ROWS, K, seed=13))
    x = act(9, K, seed=14)
    big = np.full((9, ROWS + 5), np.nan, np.float32)
    mm.matmul(w, x, out=big[:, 2:2 + ROWS])
    np.testing.assert_array_equal(big[:, 2:2 + ROWS], mm.matmul(w, x))
    assert np.isnan(big[:, :2]).all() and np.isnan(big[:, 2 + ROWS:]).all()
