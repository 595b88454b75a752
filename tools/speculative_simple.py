"""llama-speculative-simple: greedy-verified speculation with a draft model (-md, or
--spec-type draft-simple) or n-gram lookup (--spec-type ngram-simple, no draft model)."""
from __future__ import annotations

import sys

from ._args import SP
from ._common import guard, parse_or_exit
from ._spec import run_spec


def run(argv) -> int:
    return run_spec(parse_or_exit(SP, argv), "speculative-simple")


def main(argv=None) -> int:
    return guard(run, sys.argv[1:] if argv is None else argv)
