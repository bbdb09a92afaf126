"""`pi-workflows audience set|list` and `pi-workflows channel add|list|show|test|remove`.

The user's private channel configuration (`channels/config.py`, docs/channels.md): no server
call, the file is the state; the server notices a change within a second and (re)starts or
stops its channel process. Secrets (a bot token, an Apprise URL) are read from a file or
the command line, stored 0600, and never printed: `show` and `list` redact them. A bad
option is one line naming it, and nothing is stored.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import click

from pi_workflows.channels import config as cfg
from pi_workflows.channels.state import read_process, read_status
from pi_workflows.cli.errors import EXIT_USAGE, CliError
from pi_workflows.cli.json_output import print_json
from pi_workflows.cli.options import cli_state, json_option

__all__ = ["audience", "channel", "channel_states"]


def _config(ctx: click.Context) -> tuple[Path, cfg.Channels]:
    home = cli_state(ctx).home
    try:
        return home, cfg.load(home)
    except cfg.ChannelConfigError as exc:
        raise CliError(exc.message) from None


def _save(home: Path, config: cfg.Channels) -> None:
    try:
        cfg.save(home, config)
    except cfg.ChannelConfigError as exc:
        raise CliError(exc.message) from None
    except OSError as exc:
        raise CliError(f"cannot store the channel configuration: {exc}") from None


def _usage(message: str) -> CliError:
    return CliError(message, exit_code=EXIT_USAGE)


def _checked(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except cfg.ChannelConfigError as exc:
        raise _usage(exc.message) from None


# --- audiences -----------------------------------------------------------------------------


@click.group()
def audience() -> None:
    """Name who is asked: an audience maps to seats (pi, web) and channels.

    \b
    Example:
      pi-workflows audience set operator --channels pi,web,phone
    """


@audience.command("set")
@click.argument("name")
@click.option(
    "--channels",
    "seats",
    required=True,
    help="Comma-separated seats: pi (the run's origin session), web (the page) and channel"
    " names (NAME or KIND:NAME).",
)
@json_option
@click.pass_context
def audience_set(ctx: click.Context, name: str, seats: str, as_json: bool) -> None:
    """Create or change the audience NAME (`default` is every decision's that names none).

    \b
    Example:
      pi-workflows audience set operator --channels pi,telegram:phone
    """
    home, config = _config(ctx)
    _checked(cfg.check_name, name, "audience")
    items = [s.strip() for s in seats.split(",") if s.strip()]
    if not items:
        raise _usage("--channels names no seat: give pi, web or channel names, comma-separated")
    stored: list[str] = []
    for item in items:
        seat = _checked(cfg.seat_of, config, item)
        if seat not in stored:
            stored.append(seat)
    config.audiences[name] = cfg.Audience(name, tuple(stored))
    _save(home, config)
    if as_json:
        print_json({"audience": name, "channels": stored})
    else:
        click.echo(f"audience {name}: {', '.join(stored)}")


@audience.command("list")
@json_option
@click.pass_context
def audience_list(ctx: click.Context, as_json: bool) -> None:
    """List the audiences and their seats (with the default one).

    \b
    Example:
      pi-workflows audience list
    """
    _, config = _config(ctx)
    found = dict(config.audiences)
    found.setdefault(cfg.DEFAULT_AUDIENCE, config.audience(None))
    rows = [{"audience": n, "channels": list(a.seats)} for n, a in sorted(found.items())]
    if as_json:
        print_json(rows)
        return
    for row in rows:
        click.echo(f"{row['audience']}: {', '.join(row['channels'])}")


# --- channels ------------------------------------------------------------------------------


@click.group()
def channel() -> None:
    """Configure channels: Telegram (decisions and notices) and notices through Apprise.

    \b
    Example:
      pi-workflows channel add phone --kind telegram --token-file ~/.bot --chat 42 --allow-user 42
    """


@channel.command("add")
@click.argument("name")
@click.option("--kind", type=click.Choice(cfg.KINDS), required=True, help="The channel's kind.")
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="telegram: a file holding the bot token (it is copied into the private configuration).",
)
@click.option("--chat", help="telegram: the chat id decisions and notices go to.")
@click.option(
    "--allow-user",
    "allow_users",
    multiple=True,
    type=click.IntRange(1),
    help="telegram: a user id whose answers count (repeat it; others are refused).",
)
@click.option("--api-base", help="telegram: the Bot API base URL (default Telegram's).")
@click.option("--url", help="notify: the Apprise URL (ntfy://..., slack://..., json://...).")
@json_option
@click.pass_context
def channel_add(
    ctx: click.Context,
    name: str,
    kind: str,
    token_file: Path | None,
    chat: str | None,
    allow_users: tuple[int, ...],
    api_base: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Add the channel NAME; name it in an audience (`audience set`) to use it.

    \b
    Example:
      pi-workflows channel add phone --kind telegram --token-file ~/.config/bot-token \\
          --chat 123456 --allow-user 123456
      pi-workflows channel add desk --kind notify --url ntfy://ntfy.sh/my-topic
    """
    home, config = _config(ctx)
    _checked(cfg.check_name, name, "channel")
    if name in cfg.BUILTIN_SEATS:
        raise _usage(f"{name!r} is a built-in seat; give the channel another name")
    if name in config.channels:
        raise CliError(f"channel {name} exists; 'pi-workflows channel remove {name}' first")
    if kind == "telegram":
        if url is not None:
            raise _usage("--url is for --kind notify; a telegram channel takes --token-file")
        if token_file is None or chat is None or not allow_users:
            raise _usage("a telegram channel needs --token-file, --chat and --allow-user")
        if len(allow_users) > cfg.MAX_ALLOWED_USERS:
            raise _usage(f"at most {cfg.MAX_ALLOWED_USERS} --allow-user")
        added = cfg.ChannelConfig(
            name,
            "telegram",
            token=_checked(cfg.parse_token, token_file.expanduser()),
            chat=_checked(cfg.parse_chat, chat),
            allow_users=tuple(dict.fromkeys(allow_users)),
            api_base=None if api_base is None else _checked(cfg.parse_api_base, api_base),
        )
    else:
        if token_file is not None or chat is not None or allow_users or api_base is not None:
            raise _usage("--token-file, --chat, --allow-user and --api-base are for telegram")
        if url is None:
            raise _usage("a notify channel needs --url (an Apprise URL)")
        added = cfg.ChannelConfig(name, "notify", url=_checked(cfg.parse_url, url, "--url"))
    added = dataclasses.replace(added, added_at=int(time.time() * 1000))
    config.channels[name] = added
    _save(home, config)
    if as_json:
        print_json(cfg.redacted(added))
    else:
        click.echo(f"channel {name} added ({kind}); name it in an audience: pi-workflows audience"
                   f" set NAME --channels pi,web,{name}")  # fmt: skip


def _state_of(home: Path, name: str) -> dict[str, Any]:
    process = read_process(home)
    status = read_status(home).get(name, {})
    if process.get("state") not in (None, "running"):
        return {
            "state": f"process {process.get('state')}",
            "detail": str(process.get("detail") or ""),
        }
    if not status:
        return {"state": "starting" if process else "not started", "detail": ""}
    return {"state": str(status.get("state")), "detail": str(status.get("detail") or "")}


def channel_states(home: Path, audience: object) -> list[dict[str, Any]]:
    """The channels a decision's audience reaches, each with its state (for `run show`;
    none when the configuration cannot be read)."""
    try:
        config = cfg.load(home)
    except cfg.ChannelConfigError:
        return []
    wanted = config.audience(audience if isinstance(audience, str) else None)
    return [
        {"name": name, **_state_of(home, name)}
        for name in wanted.channel_names
        if name in config.channels
    ]


@channel.command("list")
@json_option
@click.pass_context
def channel_list(ctx: click.Context, as_json: bool) -> None:
    """List the channels, where they send (redacted) and their state.

    \b
    Example:
      pi-workflows channel list
    """
    home, config = _config(ctx)
    rows = []
    for name, item in sorted(config.channels.items()):
        row = cfg.redacted(item) | _state_of(home, name)
        row["audiences"] = config.users_of(name)
        rows.append(row)
    if as_json:
        print_json(rows)
        return
    if not rows:
        click.echo("no channels; add one with 'pi-workflows channel add'")
    for row in rows:
        target = row.get("chat") or row.get("url")
        detail = f" ({row['detail']})" if row["detail"] else ""
        click.echo(f"{row['name']}  {row['kind']}  {target}  {row['state']}{detail}")


def _channel_of(ctx: click.Context, name: str) -> tuple[Path, cfg.Channels, cfg.ChannelConfig]:
    home, config = _config(ctx)
    found = config.channels.get(name)
    if found is None:
        raise CliError(f"no channel {name[:60]!r}; see 'pi-workflows channel list'")
    return home, config, found


@channel.command("show")
@click.argument("name")
@json_option
@click.pass_context
def channel_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show one channel, its secrets redacted, and its state.

    \b
    Example:
      pi-workflows channel show phone
    """
    home, config, found = _channel_of(ctx, name)
    row = cfg.redacted(found) | _state_of(home, name)
    row["audiences"] = config.users_of(name)
    if as_json:
        print_json(row)
        return
    for key, value in row.items():
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        click.echo(f"{key}: {shown}")


@channel.command("test")
@click.argument("name")
@click.pass_context
def channel_test(ctx: click.Context, name: str) -> None:
    """Send a test message through the channel NAME now, from this process.

    \b
    Example:
      pi-workflows channel test phone
    """
    _, _, found = _channel_of(ctx, name)
    try:
        from pi_workflows.channels.sending import send_test  # noqa: PLC0415 - the extra
    except ImportError as exc:
        raise CliError(
            f"the channels extra is not installed ({exc}); install 'pi-workflows[channels]'"
        ) from None
    problem = asyncio.run(send_test(found))
    if problem is not None:
        raise CliError(f"channel {name}: {problem}")
    click.echo(f"channel {name}: test message sent")


@channel.command("remove")
@click.argument("name")
@click.pass_context
def channel_remove(ctx: click.Context, name: str) -> None:
    """Remove the channel NAME (refused while an audience names it).

    \b
    Example:
      pi-workflows channel remove phone
    """
    home, config, _ = _channel_of(ctx, name)
    users = config.users_of(name)
    if users:
        raise CliError(
            f"channel {name} is in audience(s) {', '.join(users)}; change them first with"
            " 'pi-workflows audience set'"
        )
    del config.channels[name]
    _save(home, config)
    click.echo(f"channel {name} removed")
