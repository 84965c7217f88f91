"""Records without ``dataclasses``: :class:`Frozen` (no assignment after construction) and :class:`Record`
(fields assigned as a run goes, as the run record's step).

``import dataclasses`` (it imports ``inspect``, ``ast``, ``dis`` and ``tokenize``) costs twice the interpreter's
whole start in instructions, and each ``@dataclass`` compiles its methods from source when its module is
imported, 3-4 M instructions a class: on the warm call they were about 40 % of the call, on a cold run a quarter
of the tool's own CPU, on a `status` poll a third (benchmarks/geak_folder.py, benchmarks/cold_imports.py).  Every
record of the tool derives from one of these two instead: fields from the class's annotations (bases first;
names starting with ``_`` are not fields), defaults from its attributes or :func:`field`, positional or keyword
arguments, ``__post_init__`` after them, equality over the compared fields, repr over the shown ones, and, for
:class:`Frozen`, a hash.  Type checkers see dataclasses (``dataclass_transform``, PEP 681).  :func:`replace` and
:func:`asdict` are ``dataclasses``' own for them.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself is not imported on the warm path
if TYPE_CHECKING:
    from typing import Any, Callable, ClassVar, Dict, Tuple, TypeVar, dataclass_transform

    R = TypeVar("R", bound="_Fields")
else:
    def dataclass_transform(**_kwargs: object) -> object:
        return lambda cls: cls

_MISSING = object()


class _Field:
    """A field's default (a value, or made anew for each record by ``default_factory``), and whether the field
    takes part in equality and hash (``compare``) and in the repr (``repr``)."""

    def __init__(self, default: object, make: Callable[[], Any] | None, compare: bool, shown: bool) -> None:
        self.default = default
        self.make = make
        self.compare = compare
        self.shown = shown


def field(*, default: Any = _MISSING, default_factory: Callable[[], Any] | None = None, compare: bool = True,
          repr: bool = True) -> Any:  # noqa: A002 (dataclasses.field's own name)
    return _Field(default, default_factory, compare, repr)


def own_annotations(cls: type) -> Dict[str, object]:
    """The names a class itself annotates (Python 3.9 lends a base's ``__annotations__`` to a class with none;
    3.14 computes them from ``__annotate__``)."""
    own = cls.__dict__.get("__annotations__")
    if own is None and "__annotate__" in cls.__dict__:
        own = cls.__annotations__
    return dict(own or {})


class _Fields:
    """What both kinds of record share: the fields, their defaults, equality and repr."""

    _fields: ClassVar[Tuple[str, ...]] = ()
    _defaults: ClassVar[Dict[str, object]] = {}
    _compared: ClassVar[Tuple[str, ...]] = ()
    _shown: ClassVar[Tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields, defaults = list(cls._fields), dict(cls._defaults)
        compared, shown = list(cls._compared), list(cls._shown)
        for name in own_annotations(cls):
            if name.startswith("_") or name in fields:
                continue
            fields.append(name)
            compare = show = True
            if name in cls.__dict__:
                value = cls.__dict__[name]
                if isinstance(value, _Field):
                    compare, show = value.compare, value.shown
                    if value.make is not None:
                        delattr(cls, name)  # made for each record, never shared through the class
                        defaults[name] = value
                    elif value.default is not _MISSING:
                        setattr(cls, name, value.default)
                        defaults[name] = value.default
                    else:
                        delattr(cls, name)
                else:
                    defaults[name] = value
            if compare:
                compared.append(name)
            if show:
                shown.append(name)
        cls._fields, cls._defaults = tuple(fields), defaults
        cls._compared, cls._shown = tuple(compared), tuple(shown)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__} takes at most {len(fields)} positional arguments")
        values = dict(zip(fields, args))
        for name, value in kwargs.items():
            if name not in fields or name in values:
                raise TypeError(f"{type(self).__name__}: unexpected or repeated argument {name!r}")
            values[name] = value
        put = object.__setattr__
        for name in fields:
            if name in values:
                put(self, name, values[name])
                continue
            default = self._defaults.get(name, _MISSING)
            if default is _MISSING:
                raise TypeError(f"{type(self).__name__}: missing argument {name!r}")
            put(self, name, default.make() if isinstance(default, _Field) and default.make else default)
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    def _key(self) -> Tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._compared)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, _Fields)
        return self._key() == other._key()

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._shown)
        return f"{type(self).__name__}({shown})"


@dataclass_transform(field_specifiers=(field,))
class Record(_Fields):
    """A record whose fields may be assigned after construction: unhashable, as a dataclass that compares."""

    __hash__ = None  # type: ignore[assignment]


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class Frozen(_Fields):
    """A frozen record: subclass it and annotate the fields (see the module's docstring)."""

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name} cannot be assigned")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name} cannot be deleted")

    def __hash__(self) -> int:
        return hash(self._key())


def replace(record: R, **changes: object) -> R:
    """A copy of ``record`` with ``changes`` (``dataclasses.replace``)."""
    values = {name: getattr(record, name) for name in record._fields}
    values.update(changes)
    return type(record)(**values)


def asdict(record: _Fields) -> Dict[str, object]:
    """Every field, with records, lists, tuples and dicts copied (``dataclasses.asdict`` for the JSON the records
    become)."""
    return {name: _copy(getattr(record, name)) for name in record._fields}


def _copy(value: object) -> object:
    if isinstance(value, _Fields):
        return asdict(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value
