"""A regular expression compiled at its first use, not when its module is imported.

A command imports the modules of every step it may take, and most of their patterns are never matched in a given
call (the source way's parsers in a release run, the git output parsers in ``clean``): compiled at import, they
cost every call.  :class:`Pattern` keeps the text and flags, and each use compiles through ``re.compile``, whose
own cache makes every use after the first a lookup.
"""

from __future__ import annotations

import re
import sys

TYPE_CHECKING = False  # typing is for the type checker only
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator, List, Optional, Union


class Pattern:
    """``re.compile(pattern, flags)``'s matching methods, the pattern compiled at the first call."""

    __slots__ = ("pattern", "flags")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags

    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.pattern, self.flags)

    def match(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Optional[re.Match[str]]:
        return self.compiled().match(string, pos, endpos)

    def fullmatch(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Optional[re.Match[str]]:
        return self.compiled().fullmatch(string, pos, endpos)

    def search(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Optional[re.Match[str]]:
        return self.compiled().search(string, pos, endpos)

    def findall(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> List[Any]:
        return self.compiled().findall(string, pos, endpos)

    def finditer(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[re.Match[str]]:
        return self.compiled().finditer(string, pos, endpos)

    def sub(self, repl: Union[str, Callable[[re.Match[str]], str]], string: str, count: int = 0) -> str:
        return self.compiled().sub(repl, string, count)

    def split(self, string: str, maxsplit: int = 0) -> List[Any]:
        return self.compiled().split(string, maxsplit)
