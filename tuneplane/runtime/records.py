"""Record classes without `@dataclass`: equality, hash, repr and `replace` from a list of field names.

`@dataclass` writes each class's `__init__`, `__repr__`, `__eq__`, … as source text and `exec`s it when
the module is imported, a cost per class that every `tp validate EXP` would pay for the records on
its path. A record declares its fields in `_fields`, writes its own `__init__` (so
type checkers and readers see the signature) and gets the rest here, with the dataclass semantics:
equal only to an instance of the very same class, field by field; mutable records are unhashable.
Standard library only: the job side uses it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # the job side may run on an older Python than typing.Self
    from typing import Self


class FrozenError(AttributeError):
    """Raised when a field of a frozen record is assigned or deleted."""


class Record:
    """A mutable record: `_fields` names its fields in order; compared and printed by them."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    __hash__: ClassVar[None] = None  # type: ignore[assignment]  # mutable, so unhashable (as a dataclass)

    def _values(self) -> tuple[object, ...]:
        """The values equality (and, when frozen, the hash) is taken over."""
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Record)
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
        return type(self)(**{name: getattr(self, name) for name in self._fields} | changes)


class FrozenRecord(Record):
    """An immutable, hashable record. `__init__` sets its fields with `self._set(...)`."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(self._values())

    def _set(self, *values: object) -> None:
        """Set every field, in `_fields` order: what a frozen record's `__init__` calls."""
        for name, value in zip(self._fields, values, strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenError(f"cannot delete field {name!r}")


def _rebuild(cls: type[Record], values: dict[str, object]) -> Record:
    return cls(**values)
