"""Cache geometry: llama.cpp src/llama-kv-cache-iswa.cpp constructor sizes as measured on
0c1e570, and --swa-extra (docs/architecture.md)."""
import pytest

from pyllama.kv import ISWACache, KVCache, cache_sizes, make_memory

from kvsupport import gemma270m_layout

# llama.cpp 0c1e570 on gemma-3-270m (its memory breakdown log lines):
# (n_ctx, n_ubatch, n_seq_max, kv_unified, swa_full) -> (n_ctx, base cells, swa cells, n_stream, can_shift)
REFERENCE = [
    ((4096, 512, 1, False, False), (4096, 4096, 1024, 1, False)),
    ((4096, 256, 1, False, False), (4096, 4096, 768, 1, False)),
    ((4096, 512, 4, True, False), (4096, 4096, 2560, 1, False)),
    ((4096, 512, 4, False, False), (4096, 1024, 1024, 4, True)),
    ((600, 512, 1, False, False), (768, 768, 768, 1, True)),
    ((4096, 512, 1, False, True), (4096, 4096, 4096, 1, True)),
]


@pytest.mark.parametrize("args,want", REFERENCE)
def test_reference_sizes(args, want):
    n_ctx, n_ubatch, n_seq_max, unified, swa_full = args
    z = cache_sizes(n_ctx, n_seq_max, n_ubatch, 512, swa_full, 0, unified)
    assert (z["n_ctx"], z["base_cells"], z["swa_cells"], z["n_stream"], z["can_shift"]) == want


@pytest.mark.parametrize("args,want", REFERENCE)
def test_iswa_cache_matches_sizes(args, want):
    n_ctx, n_ubatch, n_seq_max, unified, swa_full = args
    mem = make_memory(gemma270m_layout(), n_ctx=n_ctx, n_seq_max=n_seq_max, n_ubatch=n_ubatch,
                      kv_unified=unified, swa_full=swa_full)
    assert isinstance(mem, ISWACache)
    assert (mem.base.n_cells, mem.swa.n_cells, mem.n_stream, mem.can_shift()) == want[1:]
    assert mem.base.layers == [5, 11, 17] and len(mem.swa.layers) == 15
    assert mem.cache_for(5) is mem.base and mem.cache_for(4) is mem.swa


def test_n_ctx_rounding_and_non_unified_split():
    assert cache_sizes(600, 1, 512, 0, False)["n_ctx"] == 768
    z = cache_sizes(1000, 3, 512, 0, False, 0, False)        # 1024 // 3 = 341 -> 512 per stream
    assert (z["n_ctx"], z["n_ctx_seq"], z["n_stream"], z["swa_cells"]) == (1536, 512, 3, 0)


def test_swa_extra_enlarges_swa_cache():
    # pad256(min(n_ctx_seq, (n_swa + N) * (unified ? n_seq_max : 1) + n_ubatch))
    assert cache_sizes(4096, 1, 512, 512, False, 4, False)["swa_cells"] == 1280      # 1028 -> 1280
    assert cache_sizes(4096, 4, 512, 512, False, 8, True)["swa_cells"] == 2816       # 2592 -> 2816
    assert cache_sizes(4096, 4, 512, 512, False, 8, False)["swa_cells"] == 1024      # capped at n_ctx_seq
    assert cache_sizes(4096, 1, 512, 512, True, 8, False)["swa_cells"] == 4096


def test_memory_breakdown_bytes():
    mem = make_memory(gemma270m_layout(), n_ctx=4096, n_ubatch=512)
    mb = mem.memory_breakdown()
    # f16, 256 dims per K and V row -> 1 KiB per layer per cell: base 12 MiB, SWA 15 MiB
    assert mb["base"]["k_bytes"] + mb["base"]["v_bytes"] == 12 * 2**20
    assert mb["swa"]["k_bytes"] + mb["swa"]["v_bytes"] == 15 * 2**20
    extra = make_memory(gemma270m_layout(), n_ctx=4096, n_ubatch=512, swa_extra=4).memory_breakdown()
    assert extra["swa"]["cells"] == 1280 and extra["swa"]["swa_extra"] == 4


def test_no_swa_layers_gives_plain_cache():
    lay = gemma270m_layout()
    lay.swa_type, lay.n_swa = 0, 0
    mem = make_memory(lay, n_ctx=600)
    assert isinstance(mem, KVCache) and mem.n_cells == 768 and mem.layers == list(range(18))
    assert mem.cache_for(3) is mem and mem.can_shift()


def test_gemma3_12b_base_layers():
    from pyllama.kv import KVLayout
    lay = KVLayout(n_embd_k_gqa=[2048] * 48, n_embd_v_gqa=[2048] * 48, n_head_kv=[8] * 48,
                   is_swa=[il % 6 != 5 for il in range(48)], swa_type=1, n_swa=1024)
    mem = make_memory(lay, n_ctx=8192, n_ubatch=512)
    assert mem.base.layers == [5, 11, 17, 23, 29, 35, 41, 47] and mem.swa.n_cells == 1536
    assert mem.memory_breakdown()["swa"]["k_bytes"] * 2 // 1536 == 320 * 1024    # 320 KiB per cell
