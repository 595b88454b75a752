"""GrammarError lives in pyllama.errors; re-exported here."""
from pyllama.errors import GrammarError

__all__ = ["GrammarError"]
