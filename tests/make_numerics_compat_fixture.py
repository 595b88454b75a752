"""Write tests/data/compat-llamacpp.npz: llama.cpp 0c1e570's own one-token kernels, called through
ctypes on random blocks: quantize_row_q8_K_ref, ggml_vec_dot_q6_K_q8_K, ggml_gemv_q4_K_8x8_q8_K
(weights repacked as make_block_q4_Kx8 does), ggml_vec_dot_f16.
Run: LLAMA_CPP_LIB=<folder of llama-cpp-python 0.3.36's libggml-*.so, default /tmp/lcp>
     python tests/make_numerics_compat_fixture.py"""
import ctypes as C
import os
import sys
import numpy as np
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
LIB = os.environ.get('LLAMA_CPP_LIB', '/tmp/lcp')
from test_numerics_compat import random_k_weight, activations
from pyllama.gguf import GGMLType as T
base = C.CDLL(os.path.join(LIB, 'libggml-base.so')); cpu = C.CDLL(os.path.join(LIB, 'libggml-cpu.so')); cpu.ggml_cpu_init()
vp = C.c_void_p
def P(a): return a.ctypes.data_as(vp)
rng = np.random.default_rng(2026)
K, R, N = 512, 16, 3
q8t = np.dtype([('d', '<f4'), ('qs', 'i1', 256), ('bsums', '<i2', 16)])

def q8K(x):
    out = np.zeros(len(x) // 256, q8t)
    base.quantize_row_q8_K_ref(P(x), P(out), C.c_int64(len(x)))
    return out

def repack_q4K(raw, rows, nb):
    b = raw.reshape(rows, nb, 144)
    out = np.zeros((rows // 8, nb, 16 * 2 + 96 + 1024), np.uint8)
    for g in range(rows // 8):
        for i in range(nb):
            inb = b[8 * g:8 * g + 8, i]
            o = out[g, i]
            o[0:16] = inb[:, 0:2].reshape(-1); o[16:32] = inb[:, 2:4].reshape(-1)
            sc, qs = inb[:, 4:16].astype(np.int32), inb[:, 16:144]
            for t in range(1024 // 8):
                o[128 + 8 * t: 136 + 8 * t] = qs[t % 8, (t // 8) * 8:(t // 8) * 8 + 8]
            S = o[32:128]
            for half in range(2):
                for ii in range(4):
                    if half == 0:
                        s = sc[:, ii] & 63; m = sc[:, ii + 4] & 63
                    else:
                        s = ((sc[:, ii] & 192) >> 2) | (sc[:, ii + 8] & 15)
                        m = ((sc[:, ii + 4] & 192) >> 2) | ((sc[:, ii + 8] & 240) >> 4)
                    base_i = ii * 12 + 48 * half
                    for j in range(4):
                        S[base_i + j] = (s[j] & 63) + ((s[j + 4] & 48) << 2)
                        S[base_i + 4 + j] = (m[j] & 63) + ((m[j + 4] & 48) << 2)
                        S[base_i + 8 + j] = (s[j + 4] & 15) + ((m[j + 4] & 15) << 4)
    return out

x = activations(rng, N, K)
q8 = [q8K(np.ascontiguousarray(x[t])) for t in range(N)]
w6 = random_k_weight(rng, T.Q6_K, R, K); w4 = random_k_weight(rng, T.Q4_K, R, K)
cpu.ggml_vec_dot_q6_K_q8_K.argtypes = [C.c_int, vp, C.c_size_t, vp, C.c_size_t, vp, C.c_size_t, C.c_int]
y6 = np.zeros((N, R), np.float32); s = np.zeros(1, np.float32)
raw6 = np.ascontiguousarray(w6.raw)
for t in range(N):
    for r in range(R):
        cpu.ggml_vec_dot_q6_K_q8_K(K, P(s), 0, P(raw6[r]), 0, P(q8[t]), 0, 1); y6[t, r] = s[0]
rp = repack_q4K(np.ascontiguousarray(w4.raw), R, K // 256)
cpu.ggml_gemv_q4_K_8x8_q8_K.argtypes = [C.c_int, vp, C.c_size_t, vp, vp, C.c_int, C.c_int]
y4 = np.zeros((N, R), np.float32)
for t in range(N):
    o = np.zeros(R, np.float32)
    cpu.ggml_gemv_q4_K_8x8_q8_K(K, P(o), R, P(rp), P(q8[t]), 1, R); y4[t] = o
cpu.ggml_vec_dot_f16.argtypes = [C.c_int, vp, C.c_size_t, vp, C.c_size_t, vp, C.c_size_t, C.c_int]
lens = [32, 64, 72, 256, 40]
fa, fb, fy = [], [], []
for L in lens:
    for _ in range(8):
        a = (rng.standard_normal(L) * 10 ** rng.uniform(-2, 2, L)).astype(np.float16)
        b = rng.standard_normal(L).astype(np.float16)
        cpu.ggml_vec_dot_f16(L, P(s), 0, P(a), 0, P(b), 0, 1)
        fa.append(np.pad(a, (0, 256 - L))); fb.append(np.pad(b, (0, 256 - L))); fy.append((L, s[0]))
qq = np.stack([np.concatenate([q['qs'].reshape(-1) for q in [qt]]) for qt in q8])
np.savez_compressed(os.path.join(HERE, 'data', 'compat-llamacpp.npz'), x=x, w6=raw6, w4=np.ascontiguousarray(w4.raw),
    y6=y6, y4=y4, q8_qs=np.stack([q['qs'].reshape(-1) for q in q8]), q8_d=np.stack([q['d'] for q in q8]),
    q8_bsums=np.stack([q['bsums'].reshape(-1) for q in q8]),
    f16_a=np.stack(fa), f16_b=np.stack(fb), f16_len=np.array([l for l, _ in fy]),
    f16_dot=np.array([v for _, v in fy], np.float32))
print('ok', y6[0, :3], y4[0, :3])

# Q4_K that llama.cpp does not repack (rows % 8 != 0), Q5_K, Q2_K, Q3_K: ggml_vec_dot_q*_K_q8_K; 16
# super-blocks per row, enough for the order of Q5_K's min sum (an fma in llama.cpp's build) to show
K2 = 4096
x2 = activations(rng, N, K2)
q82 = [q8K(np.ascontiguousarray(x2[t])) for t in range(N)]
extra = {"x2": x2}
for key, wtype, fn in (("4v", T.Q4_K, cpu.ggml_vec_dot_q4_K_q8_K),
                       ("5v", T.Q5_K, cpu.ggml_vec_dot_q5_K_q8_K),
                       ("2v", T.Q2_K, cpu.ggml_vec_dot_q2_K_q8_K),
                       ("3v", T.Q3_K, cpu.ggml_vec_dot_q3_K_q8_K)):
    w = random_k_weight(rng, wtype, 12, K2)
    raw = np.ascontiguousarray(w.raw)
    fn.argtypes = [C.c_int, vp, C.c_size_t, vp, C.c_size_t, vp, C.c_size_t, C.c_int]
    y = np.zeros((N, 12), np.float32)
    for t in range(N):
        for r in range(12):
            fn(K2, P(s), 0, P(raw[r]), 0, P(q82[t]), 0, 1)
            y[t, r] = s[0]
    extra["w" + key], extra["y" + key] = raw, y
z = dict(np.load(os.path.join(HERE, 'data', 'compat-llamacpp.npz')))
z.update(extra)
np.savez_compressed(os.path.join(HERE, 'data', 'compat-llamacpp.npz'), **z)
print('vec_dot q4_K/q5_K/q2_K/q3_K', [extra['y' + k][0, :2] for k in ('4v', '5v', '2v', '3v')])
