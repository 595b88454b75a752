"""A sampler chain that records the logits it samples from (speculative-decoding tests compare
the rows a speculative run sampled with a plain run's)."""
import numpy as np

from pyllama.sampling import SamplerChain


class Recording(SamplerChain):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.rows = []

    def sample(self, logits, u=None):
        self.rows.append(np.array(logits, copy=True))
        return super().sample(logits, u)
