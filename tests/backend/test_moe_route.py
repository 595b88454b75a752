"""The CPU backend's native MoE router (_ops.moe_route: softmax, top-k, weight normalisation and
scale in one call) must give the bits of Backend.moe_route, the numpy oracle built from
ggml_soft_max_rows, a stable top-k and ggml_sum_rows' in-order double sum, including ties (the
lower expert index first), expert counts that are not a multiple of 8 (the exp tail) and batches."""
import numpy as np
import pytest

from pyllama.backend.base import Backend
from pyllama.backend.cpu import CpuBackend, _ops


@pytest.mark.skipif(_ops is None or not _ops.route_native(), reason="no AVX2/FMA build of _ops")
@pytest.mark.parametrize("n_exp,k,n", [(128, 8, 1), (128, 8, 37), (60, 4, 5), (13, 3, 9), (8, 2, 2)])
@pytest.mark.parametrize("norm,scale", [(True, 1.0), (False, 1.0), (True, 2.5), (False, 0.0)])
def test_moe_route_matches_oracle(n_exp, k, n, norm, scale):
    be = CpuBackend(n_threads=1)
    rng = np.random.default_rng([n_exp, k, n])
    x = (rng.standard_normal((n, n_exp)) * rng.choice([0.05, 2.0, 30.0], (n, 1))).astype(np.float32)
    x[0, :k + 1] = x[0, k + 1]                       # ties across the k-th place
    ids, w = be.moe_route(x, k, norm, scale)
    rids, rw = Backend.moe_route(be, x, k, norm, scale)
    assert ids.dtype == np.int32 and ids.shape == (n, k)
    np.testing.assert_array_equal(ids, rids)
    np.testing.assert_array_equal(w.view(np.int32), rw.view(np.int32))
    assert all(len(set(r)) == k for r in ids.tolist())
