"""Frozen records for the warm call's path, without ``dataclasses``.

The warm call (nothing changed: answer from the fingerprint) is the tool's most frequent call, and its floor is
the interpreter's start.  ``import dataclasses`` alone (it imports ``inspect``, ``ast``, ``dis`` and
``tokenize``) cost more instructions than the whole interpreter's start, and each ``@dataclass`` compiles its
methods from source at import: together about 40 % of a warm call (benchmarks/geak_folder.py).  The records the
warm path builds (the settings, the result, the env file's twin, the command table) derive from
:class:`Frozen` instead: fields from the class's annotations (bases first), defaults from its attributes,
positional or keyword arguments, equality, hash and repr over the compared fields, no assignment after
construction.  Type checkers see a dataclass (``dataclass_transform``, PEP 681).  Modules off the warm path
keep ``dataclasses``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself is not imported on the warm path
if TYPE_CHECKING:
    from typing import Any, Callable, ClassVar, Dict, Tuple, TypeVar, dataclass_transform

    R = TypeVar("R", bound="Frozen")
else:
    def dataclass_transform(**_kwargs: object) -> object:
        return lambda cls: cls


class _Factory:
    """A field's default made anew for each record (``field(default_factory=...)``), and whether the field
    takes part in equality, hash and repr."""

    def __init__(self, make: Callable[[], Any], compare: bool) -> None:
        self.make = make
        self.compare = compare


def field(*, default_factory: Callable[[], Any], compare: bool = True) -> Any:
    return _Factory(default_factory, compare)


_MISSING = object()


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class Frozen:
    """A frozen record: subclass it and annotate the fields (see the module's docstring)."""

    _fields: ClassVar[Tuple[str, ...]] = ()
    _defaults: ClassVar[Dict[str, object]] = {}
    _compared: ClassVar[Tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = list(cls._fields)
        defaults = dict(cls._defaults)
        compared = list(cls._compared)
        for name in own_annotations(cls):
            if name.startswith("_") or name in fields:
                continue
            fields.append(name)
            compare = True
            if name in cls.__dict__:
                value = cls.__dict__[name]
                if isinstance(value, _Factory):
                    compare = value.compare
                    delattr(cls, name)  # made for each record, never shared through the class
                defaults[name] = value
            if compare:
                compared.append(name)
        cls._fields, cls._defaults, cls._compared = tuple(fields), defaults, tuple(compared)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(self._fields):
            raise TypeError(f"{type(self).__name__} takes at most {len(self._fields)} positional arguments")
        values = dict(zip(self._fields, args))
        for name, value in kwargs.items():
            if name not in self._fields or name in values:
                raise TypeError(f"{type(self).__name__}: unexpected or repeated argument {name!r}")
            values[name] = value
        for name in self._fields:
            if name not in values:
                default = self._defaults.get(name, _MISSING)
                if default is _MISSING:
                    raise TypeError(f"{type(self).__name__}: missing argument {name!r}")
                values[name] = default.make() if isinstance(default, _Factory) else default
            object.__setattr__(self, name, values[name])
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name} cannot be assigned")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name} cannot be deleted")

    def _key(self) -> Tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._compared)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Frozen)
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._compared)
        return f"{type(self).__name__}({shown})"


def own_annotations(cls: type) -> Dict[str, object]:
    """The names a class itself annotates (Python 3.9 lends a base's ``__annotations__`` to a class with none;
    3.14 computes them from ``__annotate__``)."""
    own = cls.__dict__.get("__annotations__")
    if own is None and "__annotate__" in cls.__dict__:
        own = cls.__annotations__
    return dict(own or {})


def replace(record: R, **changes: object) -> R:
    """A copy of ``record`` with ``changes`` (``dataclasses.replace``)."""
    values = {name: getattr(record, name) for name in record._fields}
    values.update(changes)
    return type(record)(**values)


def asdict(record: Frozen) -> Dict[str, object]:
    """Every field, with lists and dicts copied (``dataclasses.asdict`` for the JSON the records become)."""
    return {name: _copy(getattr(record, name)) for name in record._fields}


def _copy(value: object) -> object:
    if isinstance(value, Frozen):
        return asdict(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value
