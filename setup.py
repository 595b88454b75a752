"""Build script: every Cython extension is listed explicitly below.

Knobs (environment variables):
  PYLLAMA_MARCH   value for -march (default "native"; use "x86-64-v3" for binaries run elsewhere,
                  "none" to pass no -march at all)
  PYLLAMA_NO_OPENMP=1  build without OpenMP (prange then runs serially)
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup


def _compiler_accepts(flags: list[str]) -> bool:
    """Probe the C compiler: does a tiny OpenMP program compile and link with these flags?"""
    cc = os.environ.get("CC", "cc")
    src = "#include <omp.h>\nint main(void){return omp_get_max_threads() > 0 ? 0 : 1;}\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "probe.c")
        with open(path, "w") as f:
            f.write(src)
        try:
            r = subprocess.run([cc, path, "-o", os.path.join(tmp, "probe"), *flags],
                               capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return r.returncode == 0


def _flags():
    compile_args = ["-O3"]
    link_args = []
    march = os.environ.get("PYLLAMA_MARCH", "native")
    if march and march != "none" and sys.platform != "win32":
        compile_args.append(f"-march={march}")
    if os.environ.get("PYLLAMA_NO_OPENMP") != "1" and _compiler_accepts(["-fopenmp"]):
        compile_args.append("-fopenmp")
        link_args.append("-fopenmp")
    else:
        print("pyllama: building without OpenMP (kernels run single-threaded)", file=sys.stderr)
    # never -ffast-math: results must not depend on the batch shape (docs/architecture.md)
    return compile_args, link_args


CARGS, LARGS = _flags()
INCLUDE = [np.get_include(), "pyllama/backend/cpu"]


def ext(name: str, source: str) -> Extension:
    return Extension(name, [source], include_dirs=INCLUDE, extra_compile_args=CARGS,
                     extra_link_args=LARGS,
                     define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])


EXTENSIONS = [
    ext("pyllama.backend.cpu._matmul", "pyllama/backend/cpu/_matmul.pyx"),
    ext("pyllama.backend.cpu._ops", "pyllama/backend/cpu/_ops.pyx"),
    ext("pyllama.backend.cpu._attn", "pyllama/backend/cpu/_attn.pyx"),
    ext("pyllama.backend.cpu._attn_q", "pyllama/backend/cpu/_attn_q.pyx"),
    ext("pyllama.backend.cpu._compat", "pyllama/backend/cpu/_compat.pyx"),
    ext("pyllama.backend.cpu._mmid", "pyllama/backend/cpu/_mmid.pyx"),
    ext("pyllama.vocab._merge", "pyllama/vocab/_merge.pyx"),
    ext("pyllama.grammar._filter", "pyllama/grammar/_filter.pyx"),
]

setup(
    packages=[
        "pyllama", "pyllama.gguf", "pyllama.quant", "pyllama.backend", "pyllama.backend.cpu",
        "pyllama.backend.cuda", "pyllama.kv", "pyllama.arch", "pyllama.vocab",
        "pyllama.sampling", "pyllama.grammar", "pyllama.speculative", "pyllama.server", "pyllama.tools",
        "pyllama._cuda", "pyllama.llama_cpp",
    ],
    package_dir={"pyllama.tools": "tools", "pyllama._cuda": "cuda"},
    package_data={"pyllama._cuda": ["*.cu", "*.cuh", "*.fatbin"],
                  "pyllama.server": ["web/*"],
                  "pyllama.backend.cpu": ["*.h", "*.pxd"]},
    ext_modules=cythonize(
        EXTENSIONS,
        compiler_directives={"language_level": 3, "boundscheck": False, "wraparound": False,
                             "cdivision": True, "initializedcheck": False},
    ),
    zip_safe=False,
)
