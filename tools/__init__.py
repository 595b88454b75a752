"""llama.cpp-compatible command-line tools (installed as pyllama.tools): thin clients of the
library. `_args` holds the one flag table; each tool module has `main(argv=None) -> int`."""
