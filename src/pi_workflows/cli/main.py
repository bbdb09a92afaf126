"""The `pi-workflows` root command, its global options, and the CLI's one error boundary.

Owns turning every failure into one line on stderr, `pi-workflows: error: <message>` (under
`--json`, `{"error": {"code", "message"}}` on stdout instead), and an exit code from
`errors.exit_code_for` (2 for usage errors). No traceback is ever printed unless
`PI_WORKFLOWS_DEBUG=1` is set. Commands live in `commands/`; this module only wires
them up.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import click

from pi_workflows.cli.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CliError, exit_code_for
from pi_workflows.cli.options import CliState
from pi_workflows.client import ClientError, ServerStartError, state_home

__all__ = ["PROG_NAME", "cli", "main"]

PROG_NAME: Final = "pi-workflows"
ERROR_PREFIX: Final = f"{PROG_NAME}: error: "


_COMMANDS: Final = {
    "server": ("server", "server"),
    "workflows": ("workflows", "workflows"),
    "run": ("runs", "run"),
    "schedule": ("schedules", "schedule"),
    "checkpoint": ("answers", "checkpoint"),
    "decision": ("answers", "decision"),
    "interaction": ("answers", "interaction"),
    "session": ("sessions", "session"),
    "effect": ("effects", "effect"),
    "state": ("state", "state"),
    "pi": ("pi", "pi_group"),
    "watch": ("watch", "watch"),
    "ui": ("ui", "ui"),
    "audience": ("channels", "audience"),
    "channel": ("channels", "channel"),
}
"""Each command: the module in `commands/` that defines it and the object's name there."""


def _load(name: str) -> click.Command:
    """Import the module of the command `name` (only the command that runs is imported,
    so `run show` does not pay for `watch`'s Textual or the other commands' modules)."""
    module_name, attribute = _COMMANDS[name]
    module = importlib.import_module(f"pi_workflows.cli.commands.{module_name}")
    command: click.Command = getattr(module, attribute)
    return command


class _Cli(click.Group):
    """The root group; its `main` is the error boundary for every command, and its commands
    are imported when they are used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return _load(cmd_name) if cmd_name in _COMMANDS else None

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        as_json = "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv
        try:
            result = super().main(
                args, prog_name or PROG_NAME, complete_var, standalone_mode=False, **extra
            )
            code = result if isinstance(result, int) and not isinstance(result, bool) else EXIT_OK
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            code = EXIT_USAGE
        except click.UsageError as exc:
            _error(_usage_line(exc), "usage", as_json)
            code = EXIT_USAGE
        except click.ClickException as exc:
            _error(exc.format_message(), "failed", as_json)
            code = exc.exit_code
        except click.Abort:
            _error("aborted", "aborted", as_json)
            code = 130
        except CliError as exc:
            _error(exc.message, exc.code, as_json)
            code = exc.exit_code
        except ClientError as exc:
            _error(_client_message(exc), exc.code, as_json, _problems_of(exc))
            code = exit_code_for(exc)
        except Exception as exc:  # the boundary: anything else is one line too, never a traceback
            code = _unexpected(exc, as_json)
        if standalone_mode:
            sys.exit(code)
        return code


@click.group(PROG_NAME, cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    None,
    "--version",
    package_name="pi-workflows",  # read by click only when --version is given
    prog_name=PROG_NAME,
    message="%(prog)s %(version)s",
)
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="State directory (default: $PI_WORKFLOWS_HOME, else $XDG_STATE_HOME/pi-workflows, "
    "else ~/.local/state/pi-workflows).",
)
@click.pass_context
def cli(ctx: click.Context, home: Path | None) -> None:
    """Durable workflows outside the agent: start and control runs, and manage the server.

    Most commands start the server on demand. Exit codes: 0 success, 1 refused or failed,
    2 bad usage, 3 no server. See docs/cli.md.

    \b
    Example:
      pi-workflows run start builtin:demo --wait
    """
    resolved = home.expanduser().absolute() if home is not None else state_home()
    ctx.obj = CliState(home=resolved)


def main() -> None:
    """Console entry point (`pi-workflows`)."""
    cli.main(prog_name=PROG_NAME)


def _error(
    message: str, code: str = "failed", as_json: bool = False, extra: dict[str, Any] | None = None
) -> None:
    """One line on stderr; under `--json`, `{"error": {"code", "message", ...extra}}` on
    stdout."""
    line = " ".join(message.split())
    if as_json:
        error = {"code": code, "message": line, **(extra or {})}
        click.echo(json.dumps({"error": error}, sort_keys=True))
    else:
        click.echo(f"{ERROR_PREFIX}{line}", err=True)


def _problems_of(exc: ClientError) -> dict[str, Any] | None:
    """`{problems, problemCount}` of a workflow file the server could not load (`run start`
    of a broken file), for `--json`; the human line already counts them."""
    details = getattr(exc, "details", None)
    if isinstance(details, dict) and isinstance(details.get("problems"), list):
        return {"problems": details["problems"], "problemCount": details.get("problemCount")}
    return None


def _client_message(exc: ClientError) -> str:
    """The client error's line; for a server that would not start, its own error line when
    it printed one (a refused state directory, a damaged database), not its log's tail."""
    if isinstance(exc, ServerStartError):
        for line in reversed(exc.log_tail.splitlines()):
            if ERROR_PREFIX in line:
                return "the server cannot start: " + line.split(ERROR_PREFIX, 1)[1]
    return exc.message


def _usage_line(exc: click.UsageError) -> str:
    message = exc.format_message()
    if exc.ctx is not None:
        return f"{message} (see '{exc.ctx.command_path} --help')"
    return message


def _unexpected(exc: Exception, as_json: bool = False) -> int:
    if os.environ.get("PI_WORKFLOWS_DEBUG") == "1":
        import traceback  # noqa: PLC0415 - only here: a start without it is ~5 ms shorter

        traceback.print_exception(exc, file=sys.stderr)
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        _error(f"{exc.strerror}{where}", "osError", as_json)
    else:
        _error(
            f"unexpected {type(exc).__name__}: {exc} (set PI_WORKFLOWS_DEBUG=1 for details)",
            "internal",
            as_json,
        )
    return EXIT_FAILURE


if __name__ == "__main__":
    main()
