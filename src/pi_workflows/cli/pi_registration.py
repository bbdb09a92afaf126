"""How pi-workflows is registered with Pi: the `packages` list of Pi's user settings
(`<agent dir>/settings.json`), read and changed the way Pi itself does it, and the loader
file earlier versions wrote instead.

Owns how `pi-workflows pi install|uninstall|doctor` see and change which Pi packages are
registered. A local package is registered as its directory's path, as `pi install ./dir`
records it (Pi's docs/packages.md); Pi identifies it by the resolved path, so `pi list`
shows it and `pi remove PATH` removes it. Changes are made under Pi's own settings lock (the
`settings.json.lock` directory its proper-lockfile creates), re-reading the file inside the
lock and replacing it atomically, so a Pi saving its settings at the same moment loses
nothing. Every other key of the file is kept as it was. Runs in the CLI process; never
starts Pi and never touches any other file of the agent directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pi_workflows.cli.errors import CliError

__all__ = [
    "LOADER_MARKER",
    "PackageEntry",
    "agent_dir",
    "legacy_loader",
    "legacy_loader_path",
    "read_packages",
    "read_settings",
    "resolve_local_source",
    "settings_path",
    "source_of",
    "update_packages",
]

LOCK_WAIT_SECONDS: Final = 5.0
"""How long to wait for a Pi that holds the settings lock."""
LOCK_STALE_SECONDS: Final = 10.0
"""A lock older than this was left by a process that died (proper-lockfile's default)."""
_NOT_LOCAL: Final = ("npm:", "git:", "github:", "http:", "https:", "ssh:", "builtin:")
"""Source prefixes Pi never reads as a local path."""
LOADER_MARKER: Final = "// pi-workflows-loader v1"
"""The first line of the loader earlier versions of `pi install` wrote (before the extension
was a Pi package); `pi install` and `pi uninstall` remove only a file that starts with it."""


def agent_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Pi's agent directory: `$PI_CODING_AGENT_DIR` when set and non-empty, else `~/.pi/agent`."""
    env = os.environ if environ is None else environ
    home = env.get("HOME")
    base = Path(home) if home else Path.home()
    explicit = env.get("PI_CODING_AGENT_DIR")
    if explicit:
        if explicit == "~" or explicit.startswith("~/"):
            return (base / explicit[2:]).absolute()
        return Path(explicit).absolute()
    return (base / ".pi" / "agent").absolute()


def settings_path(agent: Path) -> Path:
    """Pi's user settings file in the agent directory `agent`."""
    return agent / "settings.json"


@dataclass(frozen=True)
class PackageEntry:
    """One entry of `packages`: its source as written, and the directory it names."""

    source: str
    path: Path | None
    """The resolved local path (None for an npm or git source)."""


def resolve_local_source(source: str, agent: Path) -> Path | None:
    """The absolute path a local package source names, resolved as Pi resolves user settings
    (against the agent directory, `~` expanded); None for npm, git and other remote sources."""
    text = source.strip()
    if not text or text.startswith(_NOT_LOCAL):
        return None
    return Path(os.path.normpath(agent / Path(text).expanduser()))


def source_of(entry: Any) -> str | None:
    """The source string of a `packages` entry (a string, or an object with `source`)."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("source"), str):
        return str(entry["source"])
    return None


def _load(path: Path) -> dict[str, Any]:
    """The settings object in `path` (`{}` when there is no file)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read Pi's settings {path}: {exc}") from None
    if not text.strip():
        return {}
    try:
        settings = json.loads(text)
    except ValueError as exc:
        raise CliError(
            f"Pi's settings {path} are not valid JSON ({exc}); fix the file, then try again"
        ) from None
    if not isinstance(settings, dict):
        raise CliError(f"Pi's settings {path} are not a JSON object; fix the file, then try again")
    packages = settings.get("packages")
    if packages is not None and not isinstance(packages, list):
        raise CliError(
            f"Pi's settings {path} have a `packages` that is not a list; fix the file, then"
            " try again"
        )
    return settings


def read_settings(agent: Path) -> dict[str, Any]:
    """The agent directory's user settings (`{}` when there is no file).

    Raises:
        CliError: the file cannot be read or is not a JSON object (with a `packages` list).
    """
    return _load(settings_path(agent))


def read_packages(agent: Path) -> list[PackageEntry]:
    """The packages registered in the agent directory's user settings, in order."""
    entries: list[PackageEntry] = []
    for raw in read_settings(agent).get("packages") or []:
        source = source_of(raw)
        if source is not None:
            entries.append(PackageEntry(source, resolve_local_source(source, agent)))
    return entries


@contextlib.contextmanager
def _settings_lock(path: Path) -> Iterator[None]:
    """Hold Pi's lock on `path`: the directory `<path>.lock`, as proper-lockfile makes it."""
    lock = path.with_name(path.name + ".lock")
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            lock.mkdir()
            break
        except FileExistsError:
            with contextlib.suppress(OSError):
                if time.time() - lock.stat().st_mtime > LOCK_STALE_SECONDS:
                    lock.rmdir()  # left by a process that died while holding it
                    continue
            if time.monotonic() > deadline:
                raise CliError(
                    f"Pi's settings {path} stay locked ({lock} exists): close the Pi that is"
                    " changing its settings, or remove that directory if no Pi runs"
                ) from None
            time.sleep(0.02)
        except OSError as exc:
            raise CliError(f"cannot lock Pi's settings {path}: {exc}") from None
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.rmdir()


def update_packages(agent: Path, change: Callable[[list[Any]], list[Any]]) -> bool:
    """Replace the `packages` list of the agent directory's user settings with
    `change(current)`, under Pi's lock; returns whether the file changed. An empty result
    removes the key when the file did not have it."""
    path = settings_path(agent)
    try:
        agent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot create Pi's agent directory {agent}: {exc}") from None
    with _settings_lock(path):
        settings = _load(path)
        current = list(settings.get("packages") or [])
        wanted = change(list(current))
        if wanted == current:
            return False
        if wanted or "packages" in settings:
            settings["packages"] = wanted
        temporary = path.with_name(f".{path.name}.pi-workflows-{os.getpid()}.tmp")
        try:
            temporary.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n")
            with contextlib.suppress(FileNotFoundError):
                os.chmod(temporary, path.stat().st_mode & 0o7777)  # keep the file's mode
            os.replace(temporary, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise CliError(f"cannot write Pi's settings {path}: {exc}") from None
    return True


def legacy_loader_path(agent: Path) -> Path:
    """Where earlier versions of `pi install` wrote their loader: an extension directory Pi
    discovers by itself (`<agent dir>/extensions/pi-workflows/index.ts`)."""
    return agent / "extensions" / "pi-workflows" / "index.ts"


def legacy_loader(agent: Path) -> Path | None:
    """The loader an earlier `pi install` wrote, when it is there (a file at that place that
    does not start with `LOADER_MARKER` is someone else's and never counts)."""
    path = legacy_loader_path(agent)
    try:
        with open(path, encoding="utf-8") as loader:
            first = loader.readline()
    except (OSError, UnicodeDecodeError):
        return None
    return path if first == LOADER_MARKER + "\n" else None
