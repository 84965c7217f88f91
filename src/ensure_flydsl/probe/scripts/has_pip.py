"""Exit 0 when this interpreter has pip (found, not imported), 1 otherwise (``python -c``)."""
import sys

# `python -c` puts "" (the caller's folder) first on sys.path: off it first, so no file there shadows a module.
if sys.path and sys.path[0] == "":
    del sys.path[0]
import importlib.util  # noqa: E402

sys.exit(importlib.util.find_spec("pip") is None)
