"""Sampling parameters: llama.cpp's `common_params_sampling`, its sampler names and letters, and
the model's recommended values (`general.sampling.*`, common_init_sampler_from_model)."""
import dataclasses
import re
from dataclasses import dataclass, field

import numpy as np

DEFAULT_SEED = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: draw a random seed

# canonical name -> letter (common_sampler_type_to_chr)
SAMPLER_LETTERS = {
    "dry": "d", "top_k": "k", "typ_p": "y", "top_p": "p", "top_n_sigma": "s", "min_p": "m",
    "temperature": "t", "xtc": "x", "infill": "i", "penalties": "e", "adaptive_p": "a",
}
# aliases as common_sampler_types_from_names builds them: kebab-case and no-separator forms of
# the names with "_", plus nucleus, temp and typ
ALT_NAMES = {alias: name for name in SAMPLER_LETTERS if "_" in name
             for alias in (name.replace("_", "-"), name.replace("_", ""))}
ALT_NAMES.update({"nucleus": "top_p", "temp": "temperature", "typ": "typ_p"})
DEFAULT_SAMPLERS = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
                    "temperature")


def parse_sampler_names(names, allow_alt_names: bool = True, warn=None) -> list[str]:
    """`--samplers a;b;c` (or a list) -> canonical names; unknown names are skipped, with
    llama.cpp's warning passed to `warn` (e.g. a logger's warning method) when given."""
    if isinstance(names, str):
        names = names.split(";")
    out = []
    for name in names:
        name = name.lower()
        if name in SAMPLER_LETTERS:
            out.append(name)
        elif allow_alt_names and name in ALT_NAMES:
            out.append(ALT_NAMES[name])
        else:
            if warn:
                warn(f"common_sampler_types_from_names: unable to match sampler by name '{name}'")
    return out


def parse_sampler_chars(chars: str, warn=None) -> list[str]:
    """`--sampling-seq edskypmxt` -> canonical names; unknown letters are skipped (see
    parse_sampler_names for `warn`)."""
    by_letter = {c: n for n, c in SAMPLER_LETTERS.items()}
    out = []
    for c in chars:
        if c in by_letter:
            out.append(by_letter[c])
        else:
            if warn:
                warn(f"common_sampler_types_from_chars: unable to match sampler by char '{c}'")
    return out


def sampler_chars(names) -> str:
    return "".join(SAMPLER_LETTERS[n] for n in names)


@dataclass(frozen=True)
class SamplerParams:
    """Field names and defaults of llama.cpp's common_params_sampling.

    `user_set` names the fields the user gave explicitly (llama.cpp's user_sampling_config): the
    model's `general.sampling.*` values never replace those."""
    seed: int = DEFAULT_SEED
    n_prev: int = 64
    n_probs: int = 0
    min_keep: int = 0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.10
    typ_p: float = 1.0
    temp: float = 0.80
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    penalty_last_n: int = 64
    penalty_repeat: float = 1.0
    penalty_freq: float = 0.0
    penalty_present: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    dry_sequence_breakers: list = field(default_factory=lambda: ["\n", ":", '"', "*"])
    top_n_sigma: float = -1.0
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.10
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.90
    ignore_eos: bool = False
    logit_bias: dict = field(default_factory=dict)
    samplers: list = field(default_factory=lambda: list(DEFAULT_SAMPLERS))
    # structured output (common_params_sampling.grammar/grammar_lazy/grammar_triggers): GBNF
    # text or a pyllama.Grammar; triggers are (kind, value) with kind "token" (an id), "word",
    # "pattern" or "pattern_full"
    grammar: object = ""
    grammar_lazy: bool = False
    grammar_triggers: tuple = ()
    user_set: frozenset = frozenset()

    def replace(self, **changes) -> "SamplerParams":
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_gguf_metadata(cls, metadata: dict, base: "SamplerParams | None" = None) -> "SamplerParams":
        """`base` (default: the defaults) with each `general.sampling.*` value the model carries,
        except for fields in base.user_set ("samplers" for the sequence)."""
        base = base or cls()
        changes = {}
        seq = metadata.get("general.sampling.sequence")
        if seq is not None and "samplers" not in base.user_set:
            names = str(seq).split(";")
            if names:
                changes["samplers"] = parse_sampler_names(names, allow_alt_names=True)
        for name, kind in _META_FIELDS.items():
            value = metadata.get("general.sampling." + name)
            if value is None or name in base.user_set:
                continue
            parsed = _meta_int(value) if kind is int else _meta_float(value)
            if parsed is not None:
                changes[name] = parsed
        return dataclasses.replace(base, **changes)

    def describe(self) -> str:
        """llama.cpp's common_params_sampling::print() (the "sampling params" block)."""
        return (
            f"\trepeat_last_n = {self.penalty_last_n}, repeat_penalty = {self.penalty_repeat:.3f}, "
            f"frequency_penalty = {self.penalty_freq:.3f}, presence_penalty = {self.penalty_present:.3f}\n"
            f"\tdry_multiplier = {self.dry_multiplier:.3f}, dry_base = {self.dry_base:.3f}, "
            f"dry_allowed_length = {self.dry_allowed_length}, dry_penalty_last_n = {self.dry_penalty_last_n}\n"
            f"\ttop_k = {self.top_k}, top_p = {self.top_p:.3f}, min_p = {self.min_p:.3f}, "
            f"xtc_probability = {self.xtc_probability:.3f}, xtc_threshold = {self.xtc_threshold:.3f}, "
            f"typical_p = {self.typ_p:.3f}, top_n_sigma = {self.top_n_sigma:.3f}, temp = {self.temp:.3f}\n"
            f"\tmirostat = {self.mirostat}, mirostat_lr = {self.mirostat_eta:.3f}, "
            f"mirostat_ent = {self.mirostat_tau:.3f}, adaptive_target = {self.adaptive_target:.3f}, "
            f"adaptive_decay = {self.adaptive_decay:.3f}")


_META_FIELDS = {
    "top_k": int, "top_p": float, "min_p": float, "xtc_probability": float,
    "xtc_threshold": float, "temp": float, "penalty_last_n": int, "penalty_repeat": float,
    "mirostat": int, "mirostat_tau": float, "mirostat_eta": float,
}


def _meta_text(value) -> str:
    """The value as llama_model_meta_val_str renders it (floats with %f, like std::to_string)."""
    if isinstance(value, (float, np.floating)):
        return f"{float(value):f}"
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    return str(value)


def _meta_int(value):
    """strtol: the leading integer of the text, None when there is none."""
    m = re.match(r"\s*([+-]?\d+)", _meta_text(value))
    return int(m.group(1)) if m else None


def _meta_float(value):
    """strtof: the leading float of the text, rounded to float32; None when there is none."""
    m = re.match(r"\s*([+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|nan))", _meta_text(value), re.I)
    return float(np.float32(m.group(1))) if m else None
