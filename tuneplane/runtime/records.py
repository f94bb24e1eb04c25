"""Record classes without `@dataclass`: declared like dataclasses, built without generated source.

`@dataclass` writes each class's `__init__`, `__repr__`, `__eq__`, … as source text and `exec`s it when
the module is imported, a cost per class that every `tp validate EXP` would pay. A record subclasses
`Record` (mutable) or `FrozenRecord` and declares its fields as class annotations, with defaults or
`field(default_factory=...)`; its `__init__` is one shared closure that binds the arguments, and
equality, hash, repr, `replace` and `as_dict` come from the field names in `_fields`, with the
dataclass semantics: equal only to an instance of the very same class, field by field; mutable records
are unhashable; `order=True` as a class keyword orders them by their fields. A record on a hot path
writes its own `__init__` (with `__slots__` and `_fields`), which is kept.
Standard library only: the job side uses it too.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, overload

if TYPE_CHECKING:  # the job side may run on an older Python than typing.Self
    from typing import Self

_T = TypeVar("_T")

if sys.version_info >= (3, 11):  # noqa: UP036  # the job side may run an older Python
    from typing import dataclass_transform
else:  # the job side: type checkers read typing's, so this only has to leave the class alone

    def dataclass_transform(**_options: object) -> Callable[[_T], _T]:
        return lambda cls: cls


_MUTABLE_DEFAULTS = (list, dict, set)  # shared by every instance: what `field(default_factory=...)` is for


class FrozenError(AttributeError):
    """Raised when a field of a frozen record is assigned or deleted."""


class Field:
    """What `field()` returns: a field's default or the factory that makes one per instance."""

    __slots__ = ("default", "default_factory")

    def __init__(self, default: object, default_factory: Callable[[], object] | None) -> None:
        self.default = default
        self.default_factory = default_factory


_MISSING: Any = object()  # no default given


@overload
def field(*, default: _T) -> _T: ...
@overload
def field(*, default_factory: Callable[[], _T]) -> _T: ...
def field(*, default: Any = _MISSING, default_factory: Callable[[], Any] | None = None) -> Any:
    """A field's default, or the factory called for each new record (a fresh list, dict, …)."""
    if (default is _MISSING) == (default_factory is None):
        raise TypeError("field() takes exactly one of default and default_factory")
    return Field(default, default_factory)


def _is_class_var(annotation: object) -> bool:
    """Whether an annotation (a string under `from __future__ import annotations`) is a ClassVar."""
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    return annotation is ClassVar or getattr(annotation, "__origin__", None) is ClassVar


class _Base:
    """What both kinds of record share: `_fields` names the fields in order; compared and printed by them."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _hand_written: ClassVar[bool] = False
    _defaults: ClassVar[dict[str, object]] = {}  # replaced per class, never changed in place
    _factories: ClassVar[dict[str, Callable[[], object]]] = {}

    def __init_subclass__(cls, order: bool = False, **options: Any) -> None:
        super().__init_subclass__(**options)
        if order:
            _add_order(cls)
        if cls.__module__ == __name__:
            return  # `Record` and `FrozenRecord` themselves
        if "_fields" in cls.__dict__ or "__init__" in cls.__dict__:
            cls._hand_written = True  # its own `__init__`, `_fields` and `__slots__`
        if cls._hand_written:  # written by hand, or a subclass that keeps such a record's `__init__` and fields
            own = cls.__dict__
            added = [n for n, a in own.get("__annotations__", {}).items() if not _is_class_var(a)]
            if added and "_fields" not in own and "__init__" not in own:
                raise TypeError(
                    f"{cls.__qualname__} declares field(s) {', '.join(added)} but keeps the hand-written "
                    "__init__ of its base, which would ignore them: write its __init__ and _fields too"
                )
            return
        own = cls.__dict__
        annotations = cls.__annotations__ if "__annotations__" in own or "__annotate__" in own else {}
        names = [name for name, annotation in annotations.items() if not _is_class_var(annotation)]
        defaults: dict[str, object] = {}
        factories: dict[str, Callable[[], object]] = {}
        for base in reversed(cls.__mro__[1:]):
            defaults.update(getattr(base, "_defaults", {}))  # a plain class or `object` has none
            factories.update(getattr(base, "_factories", {}))
        for name in names:
            _take_default(cls, name, defaults, factories)
        inherited = cls._fields  # a redeclared field keeps its place, as in a dataclass
        cls._fields = (*inherited, *(name for name in names if name not in inherited))
        cls._defaults = defaults
        cls._factories = factories
        setattr(cls, "__match_args__", cls._fields)  # noqa: B010  # mypy refuses the plain assignment
        _check_default_order(cls)
        setattr(cls, "__init__", _make_init(cls))  # noqa: B010

    def _values(self) -> tuple[object, ...]:
        """The values equality (and, when frozen, the hash) is taken over."""
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, _Base)
        return self._values() == other._values()

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__qualname__}({inner})"

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled and copied by its fields, through `__init__` (a frozen record refuses `setattr`)."""
        return (_rebuild, (type(self), {name: getattr(self, name) for name in self._fields}))

    def replace(self, **changes: object) -> Self:
        """A copy with `changes` applied (what `dataclasses.replace` did)."""
        unknown = set(changes) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__qualname__} has no field(s) {', '.join(sorted(unknown))}")
        values = {name: getattr(self, name) for name in self._fields}
        values.update(changes)
        return type(self)(**values)

    def as_dict(self) -> dict[str, object]:
        """Field name → value, records inside it (and in its lists, tuples and dicts) turned into dicts
        too (what `dataclasses.asdict` did, without copying other values)."""
        return {name: _plain(getattr(self, name)) for name in self._fields}


@dataclass_transform(field_specifiers=(field,))
class Record(_Base):
    """A mutable record, unhashable (as a dataclass)."""

    __slots__ = ()
    __hash__: ClassVar[None] = None  # type: ignore[assignment]


@dataclass_transform(field_specifiers=(field,), frozen_default=True)
class FrozenRecord(_Base):
    """An immutable, hashable record. A hand-written `__init__` sets its fields with `self._set(...)`."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self._values())

    def _set(self, *values: object) -> None:
        """Set every field, in `_fields` order: what a frozen record's own `__init__` calls."""
        if len(values) != len(self._fields):
            raise TypeError(f"{type(self).__qualname__} has {len(self._fields)} fields, not {len(values)}")
        for name, value in zip(self._fields, values):  # noqa: B905  # lengths checked; no strict= before 3.10
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenError(f"cannot delete field {name!r}")


def _take_default(
    cls: type, name: str, defaults: dict[str, object], factories: dict[str, Callable[[], object]]
) -> None:
    """Record the default a class body gave `name` (a plain value stays as the class attribute)."""
    defaults.pop(name, None)  # redeclared: the subclass's declaration wins, as in a dataclass
    factories.pop(name, None)
    if name not in cls.__dict__:
        return
    value = cls.__dict__[name]
    if isinstance(value, Field):
        if value.default_factory is not None:
            factories[name] = value.default_factory
            delattr(cls, name)
            return
        value = value.default
        setattr(cls, name, value)
    if isinstance(value, _MUTABLE_DEFAULTS):
        raise ValueError(f"{cls.__qualname__}.{name}: a mutable default is shared; use field(default_factory=...)")
    defaults[name] = value


def _check_default_order(cls: type[_Base]) -> None:
    has_default = cls._defaults.keys() | cls._factories.keys()
    seen_default = ""
    for name in cls._fields:
        if name in has_default:
            seen_default = seen_default or name
        elif seen_default:
            raise TypeError(f"{cls.__qualname__}: field {name!r} without a default follows {seen_default!r}")


def _make_init(cls: type[_Base]) -> Callable[..., None]:
    """One `__init__` for `cls`'s fields, a closure rather than generated source."""
    names: tuple[str, ...] = cls._fields
    known = frozenset(names)
    count = len(names)
    defaults = cls._defaults
    factories = cls._factories
    post_init = getattr(cls, "__post_init__", None) is not None
    where = f"{cls.__qualname__}.__init__()"
    setter = object.__setattr__

    def __init__(self: _Base, *args: object, **kwargs: object) -> None:
        if len(args) > count:
            raise TypeError(f"{where} takes {count + 1} positional arguments but {len(args) + 1} were given")
        if kwargs and not known.issuperset(kwargs):
            unexpected = sorted(set(kwargs) - known)
            raise TypeError(f"{where} got an unexpected keyword argument {unexpected[0]!r}")
        for name, value in zip(names, args):  # noqa: B905  # args checked; no strict= before 3.10
            if name in kwargs:
                raise TypeError(f"{where} got multiple values for argument {name!r}")
            setter(self, name, value)
        for name in names[len(args) :]:
            if name in kwargs:
                setter(self, name, kwargs[name])
            elif name in defaults:
                setter(self, name, defaults[name])
            elif name in factories:
                setter(self, name, factories[name]())
            else:
                missing = [
                    n for n in names[len(args) :] if n not in kwargs and n not in defaults and n not in factories
                ]
                raise TypeError(f"{where} missing required argument(s): {', '.join(map(repr, missing))}")
        if post_init:
            self.__post_init__()  # type: ignore[attr-defined]

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _add_order(cls: type[_Base]) -> None:
    """`<`, `<=`, `>`, `>=` by the fields in order, between records of the very same class."""
    for name, test in (
        ("__lt__", operator.lt),
        ("__le__", operator.le),
        ("__gt__", operator.gt),
        ("__ge__", operator.ge),
    ):
        setattr(cls, name, _comparison(test))


def _comparison(test: Callable[[Any, Any], object]) -> Callable[[_Base, object], object]:
    def method(self: _Base, other: object) -> object:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, _Base)
        return test(self._values(), other._values())

    return method


def _plain(value: object) -> object:
    if isinstance(value, _Base):
        return value.as_dict()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if type(value) is list:
        return [_plain(item) for item in value]
    if type(value) is tuple:
        return tuple(_plain(item) for item in value)
    return value


def _rebuild(cls: type[_Base], values: dict[str, object]) -> _Base:
    return cls(**values)
