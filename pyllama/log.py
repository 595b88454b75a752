"""Logging: one logger tree under "pyllama", messages on stderr like llama.cpp's."""
import logging
import sys

logger = logging.getLogger("pyllama")


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"pyllama.{name}" if not name.startswith("pyllama") else name)


def setup(verbosity: int = 3, stream=None) -> None:
    """verbosity follows llama.cpp's -lv: 0 quiet(errors), 1 error, 2 warn, 3 info, 4 debug."""
    level = {0: logging.CRITICAL, 1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO}.get(
        verbosity, logging.DEBUG)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
