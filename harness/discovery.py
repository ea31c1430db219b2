"""The one way a package finds its parts: import every module of the package, then collect the
subclasses of a base that name themselves (``name`` set on the class) and live in the package.
Used by the compressor registry (harness/compress) and the federated methods (harness/federated/methods):
a new part is a new module, nothing else is edited."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Iterable, TypeVar

T = TypeVar("T", bound=type)


def named_subclasses(package: str, path: Iterable[str], base: T) -> dict[str, T]:
    """``{cls.name: cls}`` for every subclass (at any depth) of ``base`` that sets a non-empty string
    ``name`` in its own body and is defined in ``package``'s modules, after importing them all. Two
    classes with one name: TypeError naming both."""
    for info in pkgutil.iter_modules(path):
        importlib.import_module(f"{package}.{info.name}")
    found: dict[str, T] = {}
    todo = list(base.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        name = cls.__dict__.get("name")
        if isinstance(name, str) and name and cls.__module__.startswith(package + "."):
            if name in found and found[name] is not cls:
                raise TypeError(f"{cls.__module__}.{cls.__qualname__}.name: {name!r} is taken by "
                                f"{found[name].__module__}.{found[name].__qualname__}")
            found[name] = cls
    return found
