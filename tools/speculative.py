"""llama-speculative: decoding with a draft model (-md, required); with temperature > 0 the drafts
are accepted by rejection sampling, so the output is distributed exactly as the target's."""
from __future__ import annotations

import sys

from ._args import SP
from ._common import guard, parse_or_exit
from ._spec import run_spec


def run(argv) -> int:
    return run_spec(parse_or_exit(SP, argv), "speculative")


def main(argv=None) -> int:
    return guard(run, sys.argv[1:] if argv is None else argv)
