"""Write tests/data/vec-dot-f32-llamacpp.npz: llama.cpp 0c1e570's ggml_vec_dot_f32 (AVX2 build of
llama-cpp-python 0.3.36, called through ctypes) on random vectors of every length 1..72, the
k % 32 rest included (LoRA factors of rank 8 or 16 run through it).
Run: LLAMA_CPP_LIB=<folder of libggml-*.so, default the oracle's> \
     /work/oracle/bin/python tests/make_vec_dot_f32_fixture.py"""
import ctypes as C
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = os.environ.get("LLAMA_CPP_LIB", "/work/oracle/lib/python3.11/site-packages/llama_cpp/lib")
C.CDLL(os.path.join(LIB, "libggml-base.so"))
cpu = C.CDLL(os.path.join(LIB, "libggml-cpu.so"))
cpu.ggml_cpu_init()
vp = C.c_void_p
f = cpu.ggml_vec_dot_f32
f.argtypes = [C.c_int, vp, C.c_size_t, vp, C.c_size_t, vp, C.c_size_t, C.c_int]
rng = np.random.default_rng(72)
K, R = 72, 6
x = rng.standard_normal((K, R, K)).astype(np.float32)
y = rng.standard_normal((K, R, K)).astype(np.float32)
out = np.zeros((K, R), np.float32)
s = np.zeros(1, np.float32)
for k in range(1, K + 1):
    for r in range(R):
        a, b = np.ascontiguousarray(x[k - 1, r, :k]), np.ascontiguousarray(y[k - 1, r, :k])
        f(k, s.ctypes.data_as(vp), 0, a.ctypes.data_as(vp), 0, b.ctypes.data_as(vp), 0, 1)
        out[k - 1, r] = s[0]
np.savez_compressed(os.path.join(HERE, "data", "vec-dot-f32-llamacpp.npz"), x=x, y=y, out=out)
