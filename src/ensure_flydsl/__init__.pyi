# What the package gives, for type checkers: __init__.py hands these names on from their modules at first use.
from ensure_flydsl.api import activate as activate
from ensure_flydsl.api import ensure as ensure
from ensure_flydsl.errors import AlreadyImported as AlreadyImported
from ensure_flydsl.errors import BadInput as BadInput
from ensure_flydsl.errors import EnsureError as EnsureError
from ensure_flydsl.errors import ExitCode as ExitCode
from ensure_flydsl.result import Result as Result
from ensure_flydsl.version import __version__ as __version__

__all__ = ["AlreadyImported", "BadInput", "EnsureError", "ExitCode", "Result", "__version__", "activate", "ensure"]
