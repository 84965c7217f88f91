"""Exit 0 when this interpreter has pip (found, not imported), 1 otherwise (``python -c``)."""
import importlib.util
import sys

sys.exit(importlib.util.find_spec("pip") is None)
