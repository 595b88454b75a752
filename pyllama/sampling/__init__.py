"""Sampling: llama.cpp's sampler chain in numpy (layer L6; depends on nothing but numpy).

Glossary
  candidates   the (id, logit, p) arrays one sampling step works on (llama_token_data_array)
  chain        the samplers applied in order, ending in a selecting step (`dist`, mirostat,
               adaptive-p) that draws one uniform from the chain's RNG
  accept       recording a token that was emitted (penalties, DRY, mirostat history)

Use:
  params = SamplerParams(temp=0.7, top_k=40)          # llama.cpp defaults otherwise
  params = SamplerParams.from_gguf_metadata(reader.metadata, base=params)
  chain = SamplerChain(params, n_vocab, eog_ids=..., token_pieces=...)
  tok = chain.sample(logits); chain.accept(tok)
"""
from pyllama.sampling.chain import SamplerChain, greedy, resolve_seed, softmax_top_n
from pyllama.sampling.params import (
    DEFAULT_SAMPLERS, DEFAULT_SEED, SamplerParams, parse_sampler_chars, parse_sampler_names,
    sampler_chars)

__all__ = [
    "SamplerChain", "SamplerParams", "greedy", "resolve_seed", "softmax_top_n",
    "parse_sampler_names", "parse_sampler_chars", "sampler_chars", "DEFAULT_SAMPLERS",
    "DEFAULT_SEED",
]
