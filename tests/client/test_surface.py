"""`Client` and `AsyncClient` (and their watches) have one surface: the same public names,
the same parameters, defaults and results, the async ones awaitable."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.client import (
    AsyncClient,
    AsyncSessionWatch,
    AsyncWatch,
    Client,
    SessionWatch,
    Watch,
)

pytestmark = pytest.mark.timeout(30)

# The async twin of each blocking type that appears in a result annotation.
TWINS = {
    "AsyncClient": "Client",
    "AsyncWatch": "Watch",
    "AsyncSessionWatch": "SessionWatch",
    "AsyncIterator": "Iterator",
}
PAIRS = [(Client, AsyncClient), (Watch, AsyncWatch), (SessionWatch, AsyncSessionWatch)]


def _public(cls: type) -> dict[str, Any]:
    """The public members of a class (its own and inherited), by name; an async watch's
    `open` is its constructor (the blocking watch opens in `__init__`), compared apart."""
    constructor = {"open"} if cls in (AsyncWatch, AsyncSessionWatch) else set()
    return {
        name: inspect.getattr_static(cls, name)
        for name in dir(cls)
        if not name.startswith("_") and name not in constructor
    }


def _blocking(annotation: str) -> str:
    """A result annotation with each async type named as its blocking twin."""
    return re.sub(r"\b(" + "|".join(TWINS) + r")\b", lambda m: TWINS[m.group(1)], annotation)


def _shape(function: Callable[..., Any]) -> tuple[list[tuple[str, Any, Any]], str]:
    """The parameters (name, kind, default) after `self`, and the result annotation."""
    signature = inspect.signature(function)
    parameters = [
        (p.name, p.kind, p.default) for p in signature.parameters.values() if p.name != "self"
    ]
    return parameters, _blocking(str(signature.return_annotation))


@pytest.mark.parametrize(("blocking", "asynchronous"), PAIRS, ids=lambda cls: cls.__name__)
def test_the_async_twin_has_exactly_the_public_names_of_the_blocking_class(
    blocking: type, asynchronous: type
) -> None:
    """Every public method and property exists in both classes, and nothing else."""
    assert sorted(_public(asynchronous)) == sorted(_public(blocking))


@pytest.mark.parametrize(("blocking", "asynchronous"), PAIRS, ids=lambda cls: cls.__name__)
def test_each_method_takes_the_same_arguments_and_returns_the_same_shape(
    blocking: type, asynchronous: type
) -> None:
    """Parameter names, kinds and defaults and the result type agree; the async methods are
    coroutines (or an async generator where the blocking one is a generator)."""
    async_members = _public(asynchronous)
    for name, member in _public(blocking).items():
        twin = async_members[name]
        if isinstance(member, property):
            assert isinstance(twin, property), name
            continue
        assert callable(member), name
        assert _shape(twin) == _shape(member), name
        if inspect.isgeneratorfunction(member):
            assert inspect.isasyncgenfunction(twin), f"{name} is not an async generator"
        else:
            assert inspect.iscoroutinefunction(twin), f"{name} is not awaitable"


@pytest.mark.parametrize(("blocking", "asynchronous"), PAIRS[1:], ids=lambda cls: cls.__name__)
def test_an_async_watch_opens_with_the_arguments_of_the_blocking_one(
    blocking: type, asynchronous: type
) -> None:
    """`await AsyncWatch.open(...)` takes what `Watch(...)` takes (a watch opens at once)."""
    opened = inspect.signature(asynchronous.open)
    built = inspect.signature(blocking.__init__)
    assert [(p.name, p.kind, p.default) for p in opened.parameters.values()] == [
        (p.name, p.kind, p.default) for p in built.parameters.values() if p.name != "self"
    ]


def test_both_clients_are_built_alike_and_expose_the_same_attributes(tmp_path: Path) -> None:
    """The constructors take the same arguments and set the same public attributes."""
    assert _shape(AsyncClient.__init__) == _shape(Client.__init__)
    blocking = Client(tmp_path, client_id="same", autostart=False)
    asynchronous = AsyncClient(tmp_path, client_id="same", autostart=False)
    public = {name for name in vars(blocking) if not name.startswith("_")}
    assert public == {name for name in vars(asynchronous) if not name.startswith("_")}
    for name in public:
        assert getattr(blocking, name) == getattr(asynchronous, name), name
