"""The samplers' random numbers, stream-compatible with llama.cpp's.

llama.cpp seeds a `std::mt19937(seed)` per random sampler (dist, XTC, mirostat, adaptive-p) and
draws `std::uniform_real_distribution<double>(0, 1)` (XTC: `<float>`). libstdc++ builds those
from raw 32-bit words with `generate_canonical`: a double takes two words,
(w1 + w2 * 2^32) / 2^64; a float takes one, float(w) / 2^32 (a result that rounds up to 1 becomes
the largest value below 1). This class runs numpy's MT19937 bit generator seeded exactly like
std::mt19937's constructor (init_genrand), so the same seed gives llama.cpp's uniforms.
"""
import numpy as np

_ONE_BELOW_F64 = np.nextafter(1.0, 0.0)
_ONE_BELOW_F32 = float(np.nextafter(np.float32(1.0), np.float32(0.0)))


def mt19937_key(seed: int) -> np.ndarray:
    """std::mt19937::seed(s): mt[0] = s, mt[i] = 1812433253 * (mt[i-1] ^ mt[i-1] >> 30) + i."""
    key = np.empty(624, dtype=np.uint32)
    x = int(seed) & 0xFFFFFFFF
    key[0] = x
    for i in range(1, 624):
        x = (1812433253 * (x ^ (x >> 30)) + i) & 0xFFFFFFFF
        key[i] = x
    return key


class Mt19937:
    __slots__ = ("bits",)

    def __init__(self, seed: int = 5489):
        self.bits = np.random.MT19937()
        self.bits.state = {"bit_generator": "MT19937",
                           "state": {"key": mt19937_key(seed), "pos": 624}}

    def raw(self, n: int = 1) -> np.ndarray:
        """The next n 32-bit outputs (std::mt19937::operator())."""
        return self.bits.random_raw(n)

    def random(self) -> float:
        """std::uniform_real_distribution<double>(0, 1): two words."""
        lo, hi = (float(w) for w in self.bits.random_raw(2))
        u = (lo + hi * 4294967296.0) / 18446744073709551616.0
        return u if u < 1.0 else float(_ONE_BELOW_F64)

    def random_float(self) -> float:
        """std::uniform_real_distribution<float>(0, 1): one word, float arithmetic."""
        u = float(np.float32(int(self.bits.random_raw()))) / 4294967296.0
        return float(np.float32(u)) if u < 1.0 else _ONE_BELOW_F32

    def copy(self) -> "Mt19937":
        c = Mt19937.__new__(Mt19937)
        c.bits = np.random.MT19937()
        c.bits.state = self.bits.state
        return c
