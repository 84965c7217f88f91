"""Closed sets of names for the warm call's path, without ``enum``.

``import enum`` (it imports ``functools``, ``collections``, ``operator`` and ``types``) costs about half of the
interpreter's whole start in instructions, and each ``str``-mixed enum class about 1 M more: on the warm call,
where nothing else needs them, the three enums it built (the strategy, how the tree came to be, what the call
did) were a fifth of the call (benchmarks/geak_folder.py).  Those sets derive from :class:`Choice` instead:

    class Strategy(Choice):
        AUTO: ClassVar[Strategy]
        REUSE_ONLY: ClassVar[Strategy]

Each annotated name is a member; its value is the name in lower case with ``-`` for ``_`` (``"reuse-only"``).
A member is a ``str`` equal to, hashed as and written to JSON as its value (as a ``str``-mixed enum's is);
``str(member)`` and ``member.value`` are the plain value; ``Strategy("auto")`` returns the member or raises
ValueError; ``for s in Strategy`` goes through them in their order.  Members are made once, at the class's creation,
and the class makes no others.  Modules off the warm path keep ``enum``.
"""

from __future__ import annotations

from ensure_flydsl.support.frozen import own_annotations

TYPE_CHECKING = False  # typing is for the type checker only: not imported on the warm path
if TYPE_CHECKING:
    from typing import ClassVar, Dict, Iterator, Tuple, Type, TypeVar

    C = TypeVar("C", bound="Choice")
    M = TypeVar("M")  # a member (typeshed's EnumMeta types its __iter__ so)


class _ChoiceType(type):
    """The class of a Choice class: its members in their order, as an enum class gives them."""

    def __iter__(cls: Type[M]) -> Iterator[M]:
        return iter(cls._members.values())  # type: ignore[attr-defined]

    def __len__(cls) -> int:
        return len(cls._members)  # type: ignore[attr-defined]

    def __contains__(cls, value: object) -> bool:
        """A member, or a member's value (as ``in`` on an enum class of Python 3.12)."""
        return isinstance(value, str) and value in cls._members  # type: ignore[attr-defined]


class Choice(str, metaclass=_ChoiceType):
    """A member of a closed set of names (see the module's docstring)."""

    __slots__ = ()
    _members: ClassVar[Dict[str, Choice]] = {}
    _names: ClassVar[Dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls._members, cls._names = {}, {}
        for name in own_annotations(cls):
            if name.startswith("_"):
                continue
            value = name.lower().replace("_", "-")
            member = str.__new__(cls, value)
            cls._members[value], cls._names[value] = member, name
            setattr(cls, name, member)

    def __new__(cls: Type[C], value: str) -> C:
        member = cls._members.get(value) if isinstance(value, str) else None
        if member is None:
            raise ValueError(f"{value!r} is not a valid {cls.__name__}")
        assert isinstance(member, cls)
        return member

    @property
    def value(self) -> str:
        return str.__str__(self)

    @property
    def name(self) -> str:
        return self._names[self]

    def __str__(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value!r}>"

    def __reduce__(self) -> Tuple[object, ...]:
        return type(self), (self.value,)  # a copy or a pickle is the member itself
