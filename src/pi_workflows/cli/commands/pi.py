"""`pi-workflows pi install|uninstall|doctor`: register pi-workflows with the user's Pi, remove
it, or check the whole Pi set-up.

`install` registers this installation's Pi package (`pi_workflows.pi_package`: the wheel's
copy, or the source checkout's `integrations/pi`; its manifest loads the extension and the
`pi-workflows` skill) in Pi's user settings, as Pi's own `pi install PATH` does, so `pi list`
shows it and `pi remove PATH` removes it (`pi_registration`). At most one pi-workflows
package is registered: `install` replaces another installation's, and removes the loader
file earlier versions wrote. The agent directory is `$PI_CODING_AGENT_DIR`, else
`~/.pi/agent` (`$HOME`).

Install and uninstall are idempotent; neither contacts a server, copies a file or touches
anything but the `packages` entries of pi-workflows and the old loader. `doctor` changes
nothing (`pi_doctor`).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import click

from pi_workflows import pi_package
from pi_workflows.cli import pi_doctor
from pi_workflows.cli import pi_registration as registration
from pi_workflows.cli.errors import EXIT_FAILURE, CliError
from pi_workflows.cli.options import json_option
from pi_workflows.cli.output import print_json

__all__ = ["pi_group"]


def _package() -> Path:
    """This installation's Pi package directory.

    Raises:
        CliError: it is missing (a broken installation).
    """
    package = pi_package.package_dir()
    if package is None:
        raise CliError(
            "this pi-workflows installation has no Pi package (the extension's sources are"
            " missing); reinstall pi-workflows"
        )
    return package


def _entry_path(entry: Any, agent: Path) -> Path | None:
    """The local directory a `packages` entry names (None for a remote or odd entry)."""
    source = registration.source_of(entry)
    return None if source is None else registration.resolve_local_source(source, agent)


def _is_pi_workflows(entry: Any, agent: Path) -> bool:
    """Whether a `packages` entry names a pi-workflows Pi package (of any installation), or
    the package of a wheel installation that is gone (`.../pi_workflows/integrations/pi`
    that no longer exists, say after `pipx uninstall`)."""
    path = _entry_path(entry, agent)
    if path is None:
        return False
    if pi_package.is_pi_workflows_package(path):
        return True
    return path.parts[-3:] == ("pi_workflows", "integrations", "pi") and not path.exists()


def _same_path(entry: Any, agent: Path, package: Path) -> bool:
    """Whether a `packages` entry names the directory `package` (Pi's identity of a local
    package is its resolved path)."""
    path = _entry_path(entry, agent)
    return path is not None and os.path.realpath(path) == os.path.realpath(package)


def _remove_legacy_loader(agent: Path) -> Path | None:
    """Remove the loader an earlier `pi install` wrote (and its directory, when empty)."""
    loader = registration.legacy_loader(agent)
    if loader is None:
        return None
    try:
        loader.unlink()
    except OSError as exc:
        raise CliError(f"cannot remove the old pi-workflows loader {loader}: {exc}") from None
    with contextlib.suppress(OSError):
        loader.parent.rmdir()  # only when nothing else was put there
    return loader


@click.group("pi")
def pi_group() -> None:
    """Register pi-workflows with the Pi coding agent, remove it, or check the Pi set-up.

    \b
    Example:
      pi-workflows pi install
    """


@pi_group.command("install")
@json_option
def install(as_json: bool) -> None:
    """Register the pi-workflows Pi package (extension and skill) with your Pi (idempotent).

    Adds this installation's Pi package to `packages` in <agent dir>/settings.json, where the
    agent directory is $PI_CODING_AGENT_DIR, else ~/.pi/agent, as `pi install PATH` would:
    `pi list` shows it, `pi remove PATH` removes it. Replaces another installation's
    pi-workflows package. Run it again after moving this installation.

    \b
    Example:
      pi-workflows pi install --json
    """
    package = _package()
    agent = registration.agent_dir()
    replaced: list[str] = []

    def change(packages: list[Any]) -> list[Any]:
        kept: list[Any] = []
        present = False
        for entry in packages:
            if _same_path(entry, agent, package):
                if not present:
                    kept.append(entry)
                present = True
            elif _is_pi_workflows(entry, agent):
                replaced.append(str(registration.source_of(entry)))
            else:
                kept.append(entry)
        if not present:
            kept.append(str(package))
        return kept

    changed = registration.update_packages(agent, change)
    loader = _remove_legacy_loader(agent)
    cli = pi_package.bundled_cli(package)
    document = {
        "installed": True,
        "changed": changed or loader is not None,
        "package": str(package),
        "extension": str(package / "extension" / "index.ts"),
        "skill": str(pi_package.skill_file() or ""),
        "settings": str(registration.settings_path(agent)),
        "agentDir": str(agent),
        "cli": None if cli is None else str(cli),
        "replaced": replaced,
        "removedLoader": None if loader is None else str(loader),
    }
    if as_json:
        print_json(document)
        return
    what = "registered" if document["changed"] else "already registered"
    click.echo(f"Pi package {what}: {package} (in {document['settings']})")
    for source in replaced:
        click.echo(f"  replaced another installation's package: {source}")
    if loader is not None:
        click.echo(f"  removed the old loader: {loader}")
    if cli is not None:
        click.echo(f"  its extension starts servers with {cli}")
    else:
        click.echo(
            "  its extension looks for `pi-workflows` on PATH (set PI_WORKFLOWS_CLI in Pi's"
            " environment to name one)"
        )
    if document["changed"]:
        click.echo(
            "Start Pi (or run /reload in a running Pi) to load /workflow, the workflow tool"
            " and the pi-workflows skill."
        )


@pi_group.command("uninstall")
@json_option
def uninstall(as_json: bool) -> None:
    """Unregister every pi-workflows Pi package from your Pi (idempotent).

    Removes the pi-workflows entries from `packages` in <agent dir>/settings.json (and the
    loader file earlier versions wrote); other packages and settings are never touched.

    \b
    Example:
      pi-workflows pi uninstall
    """
    agent = registration.agent_dir()
    package = pi_package.package_dir()
    removed: list[str] = []

    def change(packages: list[Any]) -> list[Any]:
        kept: list[Any] = []
        for entry in packages:
            ours = package is not None and _same_path(entry, agent, package)
            if ours or _is_pi_workflows(entry, agent):
                removed.append(str(registration.source_of(entry)))
            else:
                kept.append(entry)
        return kept

    registration.update_packages(agent, change)
    loader = _remove_legacy_loader(agent)
    document = {
        "removed": bool(removed) or loader is not None,
        "sources": removed,
        "removedLoader": None if loader is None else str(loader),
        "settings": str(registration.settings_path(agent)),
        "agentDir": str(agent),
    }
    if as_json:
        print_json(document)
        return
    if not document["removed"]:
        click.echo(f"pi-workflows is not registered with Pi (nothing in {document['settings']})")
        return
    for source in removed:
        click.echo(f"Pi package removed: {source} (from {document['settings']})")
    if loader is not None:
        click.echo(f"old loader removed: {loader}")


@pi_group.command("doctor")
@json_option
@click.pass_context
def doctor(ctx: click.Context, as_json: bool) -> None:
    """Check the Pi set-up: Pi is found, its Node is new enough, the pi-workflows package is
    registered, Pi has a model whose endpoint accepts a connection, and the rg and fd that
    Pi's grep and find tools run are there (a warning). Each failure or warning comes with a
    one-line fix; exits 1 when a check fails.

    Pi is $PI_WORKFLOWS_PI, else `pi` on PATH. Starts Pi without extensions or a session to
    ask which model it would use; changes nothing.

    \b
    Example:
      pi-workflows pi doctor
    """
    agent, checks = pi_doctor.run_checks()
    ok = all(check.ok for check in checks)
    if as_json:
        print_json(
            {"ok": ok, "agentDir": str(agent), "checks": [check.to_json() for check in checks]}
        )
    else:
        click.echo(f"Pi set-up (agent directory {agent}):")
        width = max(len(check.name) for check in checks)
        for check in checks:
            mark = "FAIL" if not check.ok else "warn" if check.warning else "ok  "
            click.echo(f"  {mark}  {check.name:<{width}}  {check.detail}")
            if check.fix:
                click.echo(f"        {'':<{width}}  fix: {check.fix}")
        warnings = sum(1 for check in checks if check.warning)
        if not ok:
            click.echo("some checks failed")
        elif warnings:
            click.echo(f"all checks passed, {warnings} with a warning")
        else:
            click.echo("all checks passed")
    if not ok:
        ctx.exit(EXIT_FAILURE)
