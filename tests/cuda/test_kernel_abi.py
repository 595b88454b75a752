"""The launch table (pyllama.backend.cuda.backend.kernel_signatures) matches the kernels: every
kernel the backend launches exists in its module with exactly the parameters the Python side
packs (count, order, size and kind), read from the PTX nvcc emits. No GPU needed; a mismatch
here would pass garbage arguments at launch on a GPU."""
import os
import re
import shutil
import subprocess

import pytest

from pyllama.backend.cuda.backend import kernel_signatures
from pyllama.backend.cuda.runtime import KERNEL_FILES, kernel_dir

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")

# struct letter -> PTX parameter types it may bind to
PTX_TYPES = {"P": {".u64"}, "q": {".u64", ".s64", ".b64"}, "i": {".u32", ".s32", ".b32"},
             "f": {".f32"}}
ENTRY = re.compile(r"\.visible\s+\.entry\s+(\w+)\s*\(([^)]*)\)", re.S)
PARAM = re.compile(r"\.param\s+(\.\w+)\s+(?:\.ptr\s+\S+\s+)?(?:\.align\s+\d+\s+)?(\w+)")


@pytest.fixture(scope="module")
def ptx_entries(tmp_path_factory):
    out = tmp_path_factory.mktemp("ptx")
    entries = {}
    for name in KERNEL_FILES:
        ptx = out / f"{name}.ptx"
        subprocess.run(["nvcc", "-ptx", "-arch=sm_80", "-std=c++17", "-I", kernel_dir(), "-o",
                        str(ptx), os.path.join(kernel_dir(), name + ".cu")], check=True,
                       timeout=600)
        for m in ENTRY.finditer(ptx.read_text()):
            entries[m.group(1)] = (name, [t for t, _ in PARAM.findall(m.group(2))])
    return entries


def test_every_launched_kernel_exists_with_its_signature(ptx_entries):
    sigs = kernel_signatures()
    assert len(sigs) > 30
    for kname, (module, fmt) in sigs.items():
        assert kname in ptx_entries, f"{kname} not in any module"
        mod, params = ptx_entries[kname]
        assert mod == module, (kname, mod, module)
        assert len(params) == len(fmt), (kname, params, fmt)
        for i, (t, c) in enumerate(zip(params, fmt)):
            assert t in PTX_TYPES[c], f"{kname} param {i}: PTX {t} vs format {c!r}"


def test_no_unlaunched_kernels(ptx_entries):
    """Every kernel in the modules is reachable from the backend (no dead kernels)."""
    assert set(ptx_entries) == set(kernel_signatures())
