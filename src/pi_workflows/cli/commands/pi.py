"""`pi-workflows pi install|uninstall`: register the Pi extension with the user's Pi, or remove it.

Owns the one file that registers the extension: `<agent dir>/extensions/pi-workflows/index.ts`,
a loader Pi discovers on its own (an extension directory with an `index.ts`, one of the
locations Pi's docs/extensions.md lists). The loader imports the extension from this source
checkout (`integrations/pi/extension/index.ts`) and passes it the absolute path of the
`pi-workflows` executable of the running interpreter, so the extension starts servers with the
same installation. The agent directory is `$PI_CODING_AGENT_DIR`, else `~/.pi/agent` (`$HOME`).

Install and uninstall are idempotent, and uninstall removes exactly what install wrote: the
loader (only when it carries this module's marker) and its directory when that is left empty.
Neither contacts a server, nor touches Pi's settings, sessions or any other file.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import click

from pi_workflows.cli.errors import CliError
from pi_workflows.cli.options import json_option
from pi_workflows.cli.output import print_json

__all__ = [
    "LOADER_MARKER",
    "agent_dir",
    "cli_executable",
    "extension_source",
    "loader_path",
    "loader_text",
    "pi_group",
]

EXTENSION_DIR_NAME: Final = "pi-workflows"
"""The extension's directory inside `<agent dir>/extensions`."""

LOADER_MARKER: Final = "// pi-workflows-loader v1"
"""The line that marks a loader written by `pi install`; uninstall removes only such files."""

_REPO_ROOT: Final = Path(__file__).resolve().parents[4]


def agent_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Pi's agent directory: `$PI_CODING_AGENT_DIR` when set and non-empty, else `~/.pi/agent`."""
    env = os.environ if environ is None else environ
    explicit = env.get("PI_CODING_AGENT_DIR")
    if explicit:
        return Path(explicit).expanduser().absolute()
    home = env.get("HOME")
    base = Path(home) if home else Path.home()
    return (base / ".pi" / "agent").absolute()


def loader_path(agent: Path) -> Path:
    """Where the loader lives inside the agent directory `agent`."""
    return agent / "extensions" / EXTENSION_DIR_NAME / "index.ts"


def extension_source() -> Path:
    """The extension's entry point in this source checkout.

    Raises:
        CliError: this installation has no `integrations/pi/extension/index.ts` (it was not
            installed from a source checkout).
    """
    entry = _REPO_ROOT / "integrations" / "pi" / "extension" / "index.ts"
    if not entry.is_file():
        raise CliError(
            f"the Pi extension's sources are not at {entry}; `pi-workflows pi install` needs "
            "pi-workflows installed from a source checkout (see docs/pi.md)"
        )
    return entry


def cli_executable() -> Path:
    """The absolute path of this installation's `pi-workflows` executable.

    The one next to the running interpreter (the virtual environment's), else the first on
    PATH. Symlinks are kept: a virtual environment's interpreter is usually one.

    Raises:
        CliError: neither exists.
    """
    beside = Path(os.path.abspath(sys.executable)).parent / "pi-workflows"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("pi-workflows")
    if found:
        return Path(os.path.abspath(found))
    raise CliError(
        f"cannot find the pi-workflows executable (not next to {sys.executable}, not on PATH)"
    )


def loader_text(extension: Path, cli: Path) -> str:
    """The loader's source: it imports the extension and hands it the CLI's path."""
    # json.dumps writes a valid JavaScript string literal for any path.
    return (
        f"{LOADER_MARKER}\n"
        "// Written by `pi-workflows pi install`; `pi-workflows pi uninstall` removes it.\n"
        f"import {{ createWorkflowExtension }} from {json.dumps(str(extension))};\n"
        "\n"
        f"export default createWorkflowExtension({{ cli: {json.dumps(str(cli))} }});\n"
    )


@dataclass(frozen=True)
class _Loader:
    """What is at the loader's place now."""

    path: Path
    text: str | None
    """The file's content, or None when there is no file."""

    @property
    def ours(self) -> bool:
        return self.text is not None and self.text.startswith(LOADER_MARKER + "\n")


def _read_loader(path: Path) -> _Loader:
    try:
        return _Loader(path, path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return _Loader(path, None)
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None


@click.group("pi")
def pi_group() -> None:
    """Register the pi-workflows extension with the Pi coding agent, or remove it.

    \b
    Example:
      pi-workflows pi install
    """


@pi_group.command("install")
@json_option
def install(as_json: bool) -> None:
    """Register the extension with your Pi (idempotent); it finds this pi-workflows itself.

    Writes <agent dir>/extensions/pi-workflows/index.ts, where the agent directory is
    $PI_CODING_AGENT_DIR, else ~/.pi/agent. Run it again after moving this installation.

    \b
    Example:
      pi-workflows pi install --json
    """
    extension = extension_source()
    cli = cli_executable()
    agent = agent_dir()
    current = _read_loader(loader_path(agent))
    if current.text is not None and not current.ours:
        raise CliError(
            f"{current.path} exists and was not written by pi-workflows; move it away first"
        )
    wanted = loader_text(extension, cli)
    changed = current.text != wanted
    if changed:
        current.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = current.path.with_name(current.path.name + ".tmp")
        temporary.write_text(wanted, encoding="utf-8")
        os.replace(temporary, current.path)
    if as_json:
        print_json(
            {
                "installed": True,
                "changed": changed,
                "loader": str(current.path),
                "extension": str(extension),
                "cli": str(cli),
                "agentDir": str(agent),
            }
        )
        return
    what = "installed" if changed else "already installed"
    click.echo(f"Pi extension {what}: {current.path} (loads {extension}, runs {cli})")
    if changed:
        click.echo(
            "Start Pi (or run /reload in a running Pi) to load /workflow and the workflow tool."
        )


@pi_group.command("uninstall")
@json_option
def uninstall(as_json: bool) -> None:
    """Remove what `pi install` wrote (idempotent); other files are never touched.

    \b
    Example:
      pi-workflows pi uninstall
    """
    agent = agent_dir()
    current = _read_loader(loader_path(agent))
    if current.text is not None and not current.ours:
        raise CliError(f"{current.path} was not written by pi-workflows; leaving it in place")
    removed = current.text is not None
    if removed:
        current.path.unlink()
        # The directory goes too, unless something else was put in it.
        with contextlib.suppress(OSError):
            current.path.parent.rmdir()
    if as_json:
        print_json({"removed": removed, "loader": str(current.path), "agentDir": str(agent)})
        return
    if removed:
        click.echo(f"Pi extension removed: {current.path}")
    else:
        click.echo(f"Pi extension is not installed (no {current.path})")
