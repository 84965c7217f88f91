# What the package gives, for type checkers: __init__.py hands these names on from api.py at their first use.
from ensure_flydsl.api import AlreadyImported as AlreadyImported
from ensure_flydsl.api import BadInput as BadInput
from ensure_flydsl.api import EnsureError as EnsureError
from ensure_flydsl.api import ExitCode as ExitCode
from ensure_flydsl.api import Result as Result
from ensure_flydsl.api import __version__ as __version__
from ensure_flydsl.api import activate as activate
from ensure_flydsl.api import ensure as ensure

__all__ = ["AlreadyImported", "BadInput", "EnsureError", "ExitCode", "Result", "__version__", "activate", "ensure"]
