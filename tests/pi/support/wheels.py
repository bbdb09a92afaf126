"""Offline wheels of what is installed: a local package index for installing a built
pi-workflows wheel into a fresh virtual environment without a network.

Owns `runtime_wheelhouse`: it finds the runtime dependencies of the installed `pi-workflows`
(its `Requires-Dist`, recursively, base requirements only) in the running interpreter's
environment and packs each installed distribution back into a wheel (its files as RECORD
lists them, with its own WHEEL tags and a new RECORD), so `pip install --no-index
--find-links DIR` resolves them as it would from an index. Scripts and data outside
site-packages are left out: pip writes console scripts again from the entry points. It
never touches the environment it reads.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

__all__ = ["runtime_wheelhouse"]

_SKIPPED = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_closure(root: str) -> list[metadata.Distribution]:
    """The installed distributions `root` needs at run time (without `root`), by name: its
    base requirements, recursively, with the extras each requirement asks for."""
    seen: dict[str, metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    pending: list[tuple[str, str]] = [(root, "")]
    while pending:
        name, extra = pending.pop()
        if (name, extra) in done:
            continue
        done.add((name, extra))
        dist = metadata.distribution(name)
        if _normal(name) != _normal(root):
            seen[_normal(name)] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is not None and not marker.evaluate({"extra": extra}):
                continue
            pending += [(requirement.name, wanted) for wanted in ("", *requirement.extras)]
    return [seen[name] for name in sorted(seen)]


def _digest(data: bytes) -> str:
    encoded = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={encoded}"


def _compressed(tags: list[str]) -> str:
    """A wheel file name's tag for `tags` (`py2-none-any` and `py3-none-any` become
    `py2.py3-none-any`): each part's values in the order they appear."""
    parts: list[list[str]] = [[], [], []]
    for tag in tags:
        for values, value in zip(parts, tag.split("-"), strict=True):
            if value not in values:
                values.append(value)
    return "-".join(".".join(values) for values in parts)


def repack(dist: metadata.Distribution, dest: Path) -> Path:
    """Pack the installed distribution `dist` into a wheel in `dest`; returns its path."""
    files = [f for f in dist.files or [] if not str(f).startswith("..")]
    info = next(f for f in files if str(f).endswith(".dist-info/WHEEL"))
    info_dir = str(info).rsplit("/", 1)[0]
    tags = [
        line.split(":", 1)[1].strip()
        for line in Path(str(dist.locate_file(info))).read_text().splitlines()
        if line.startswith("Tag:")
    ]
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    wheel = dest / f"{name}-{dist.version}-{_compressed(tags)}.whl"
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for entry in files:
            path = str(entry)
            if "__pycache__" in path or (
                path.startswith(info_dir + "/") and path.rsplit("/", 1)[1] in _SKIPPED
            ):
                continue
            data = Path(str(dist.locate_file(entry))).read_bytes()
            archive.writestr(path, data)
            writer.writerow([path, _digest(data), len(data)])
        writer.writerow([f"{info_dir}/RECORD", "", ""])
        archive.writestr(f"{info_dir}/RECORD", record.getvalue())
    return wheel


def runtime_wheelhouse(dest: Path, root: str = "pi-workflows") -> list[Path]:
    """Wheels of every runtime dependency of the installed `root`, written into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    return [repack(dist, dest) for dist in runtime_closure(root)]
