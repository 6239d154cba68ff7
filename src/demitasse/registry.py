"""One name → class registry, shared by compressors (keyed by ``method``) and quantisers
(keyed by ``precision``), so ``make_*``/``load_*`` dispatch the same way for both."""

from __future__ import annotations

from typing import Generic, TypeVar

from demitasse.errors import UnknownCompressionNameError

T = TypeVar("T", bound=type)


class Registry(Generic[T]):
    def __init__(self, kind: str, key: str) -> None:
        self.kind = kind  # "compressor" | "precision": used in messages
        self.key = key  # class attribute holding the registry name
        self._classes: dict[str, T] = {}

    def register(self, cls: T) -> T:
        """Class decorator: make ``cls`` available under its ``key`` attribute."""
        name = getattr(cls, self.key, None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"{cls.__name__} needs a non-empty class attribute {self.key!r}")
        existing = self._classes.get(name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise TypeError(f"{self.kind} {name!r} is already registered by {existing}")
        self._classes[name] = cls
        return cls

    def names(self) -> list[str]:
        return sorted(self._classes)

    def lookup(self, name: str) -> T:
        try:
            return self._classes[name]
        except KeyError:
            raise UnknownCompressionNameError(
                f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}"
            ) from None
