"""The user's audiences and channels: one private file, `<state dir>/channels/config.json`.

Read and written by the CLI (`pi-workflows audience ...`, `pi-workflows channel ...`), read
by the server (whether to run the channel process, and which seats a decision's audience
names) and by the channel process. The directory is 0700 and the file 0600, written whole
and atomically (a temporary file, fsync, rename, fsync of the directory), so a reader sees
the old or the new configuration, never half of one.

It holds secrets (a Telegram bot token, an Apprise URL's credentials): nothing here ever
logs or prints them; `redacted` is what `channel show` and `channel list` print. Workflow
code never sees this file: runners get no path to it and no value from it (the server puts
only an audience's seat names into a decision's request).

Imports only the standard library and the protocol: the server imports this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pi_workflows.protocol import AUDIENCE_PATTERN

__all__ = [
    "BUILTIN_SEATS",
    "CONFIG_NAME",
    "CONFIG_SCHEMA",
    "DEFAULT_AUDIENCE",
    "DIR_NAME",
    "KINDS",
    "MAX_ALLOWED_USERS",
    "Audience",
    "ChannelConfig",
    "ChannelConfigError",
    "Channels",
    "channels_dir",
    "check_name",
    "load",
    "parse_api_base",
    "parse_chat",
    "parse_token",
    "parse_url",
    "redacted",
    "save",
    "seat_of",
    "seats_for",
    "write_private",
]

DIR_NAME: Final = "channels"
"""The folder of `<state dir>` that holds the configuration and the channel process's state."""

CONFIG_NAME: Final = "config.json"
CONFIG_SCHEMA: Final = "pi-workflows.channels.v1"

DEFAULT_AUDIENCE: Final = "default"
"""The audience of a decision or notice that names none: the origin session and the page,
plus whatever channels `audience set default` adds."""

BUILTIN_SEATS: Final = ("pi", "web")
"""Seats that are no configured channel: the run's origin Pi session, and the web page."""

KINDS: Final = ("telegram", "notify")
MAX_CONFIG_BYTES: Final = 256 * 1024
MAX_TOKEN_FILE_BYTES: Final = 1024
MAX_URL_CHARS: Final = 2048
MAX_ALLOWED_USERS: Final = 100
MAX_CHANNELS: Final = 50
MAX_AUDIENCES: Final = 100

_TOKEN: Final = re.compile(r"[0-9]{1,20}:[A-Za-z0-9_-]{20,100}")
_CHAT: Final = re.compile(r"-?[0-9]{1,20}|@[A-Za-z][A-Za-z0-9_]{3,63}")
_API_BASE: Final = re.compile(r"https?://[^\s]{1,500}")


class ChannelConfigError(Exception):
    """A channel or audience that cannot be stored or read as given (a bad name, a missing
    token file, an unknown channel in an audience, an unreadable configuration file).
    `message` is one line saying what is wrong and what to do; it never holds a secret."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class ChannelConfig:
    """One configured channel. `token` and `url` are secrets: print `redacted(...)`."""

    name: str
    kind: str  # "telegram" | "notify"
    token: str | None = None  # telegram: the bot token
    chat: str | None = None  # telegram: the chat id (or @channel) messages go to
    allow_users: tuple[int, ...] = ()  # telegram: the user ids whose answers count
    api_base: str | None = None  # telegram: the Bot API base URL (None: Telegram's)
    url: str | None = None  # notify: the Apprise URL
    added_at: int = 0  # epoch ms of `channel add`: older notices are never sent to it

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "addedAt": self.added_at}
        if self.kind == "telegram":
            data.update(token=self.token, chat=self.chat, allowUsers=list(self.allow_users))
            if self.api_base is not None:
                data["apiBase"] = self.api_base
        else:
            data["url"] = self.url
        return data


@dataclass(frozen=True)
class Audience:
    """Who a decision or notice is addressed to: `pi`, `web` and channel names."""

    name: str
    seats: tuple[str, ...]

    @property
    def channel_names(self) -> tuple[str, ...]:
        """The configured channels among the seats."""
        return tuple(s for s in self.seats if s not in BUILTIN_SEATS)


@dataclass
class Channels:
    """The whole configuration (what `config.json` holds)."""

    channels: dict[str, ChannelConfig] = field(default_factory=dict)
    audiences: dict[str, Audience] = field(default_factory=dict)

    def audience(self, name: str | None) -> Audience:
        """The audience `name` (None: the default one). An audience that is not configured
        (removed since the workflow was written) is the default one: nothing is lost."""
        wanted = self.audiences.get(name or DEFAULT_AUDIENCE)
        if wanted is not None:
            return wanted
        return self.audiences.get(DEFAULT_AUDIENCE) or Audience(DEFAULT_AUDIENCE, BUILTIN_SEATS)

    def users_of(self, channel: str) -> list[str]:
        """The audiences that name `channel`."""
        return sorted(a.name for a in self.audiences.values() if channel in a.seats)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": CONFIG_SCHEMA,
            "channels": {n: c.to_json() for n, c in sorted(self.channels.items())},
            "audiences": {
                n: {"channels": list(a.seats)} for n, a in sorted(self.audiences.items())
            },
        }


def channels_dir(home: Path) -> Path:
    """`<state dir>/channels` (not created here)."""
    return home / DIR_NAME


def check_name(name: str, what: str) -> str:
    """`name` if it is a valid audience or channel name, else a `ChannelConfigError`."""
    if not AUDIENCE_PATTERN.fullmatch(name):
        raise ChannelConfigError(
            f"{what} name {name[:60]!r} is not valid: use 1-40 lower-case letters, digits,"
            " _ and -, starting with a letter"
        )
    return name


def parse_token(path: Path) -> str:
    """The bot token in the file `path` (one line), checked for the Bot API's shape."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise ChannelConfigError(
            f"cannot read the token file {path}: {exc.strerror or exc}; give the path of a"
            " file holding the bot token"
        ) from None
    if len(raw) > MAX_TOKEN_FILE_BYTES:
        raise ChannelConfigError(f"the token file {path} is larger than a bot token")
    token = raw.decode("utf-8", "replace").strip()
    if not _TOKEN.fullmatch(token):
        raise ChannelConfigError(
            f"the token file {path} does not hold a bot token (digits, ':', then letters,"
            " digits, _ and -, as @BotFather gives it)"
        )
    return token


def parse_chat(chat: str) -> str:
    """A Telegram chat id (a number, negative for groups) or a public channel's @name."""
    if not _CHAT.fullmatch(chat):
        raise ChannelConfigError(
            f"--chat {chat[:60]!r} is not a chat id: give the chat's number (negative for a"
            " group) or a channel's @name"
        )
    return chat


def parse_url(url: str, what: str) -> str:
    """An Apprise URL or a Bot API base: bounded, `scheme://...`, no blanks."""
    if len(url) > MAX_URL_CHARS or "://" not in url or any(c.isspace() for c in url):
        raise ChannelConfigError(
            f"{what} is not a URL of the form scheme://... (at most {MAX_URL_CHARS}"
            " characters, no blanks)"
        )
    return url


def parse_api_base(url: str) -> str:
    """The Bot API base URL (`--api-base`): http(s), as `https://api.telegram.org/bot`."""
    if not _API_BASE.fullmatch(url):
        raise ChannelConfigError(
            "--api-base must be an http(s) URL such as https://api.telegram.org/bot"
        )
    return url


def redacted(channel: ChannelConfig) -> dict[str, Any]:
    """What may be printed of `channel`: never its token, never an URL's credentials."""
    data: dict[str, Any] = {"name": channel.name, "kind": channel.kind}
    if channel.kind == "telegram":
        data["token"] = "(set, hidden)" if channel.token else "(missing)"
        data["chat"] = channel.chat
        data["allowUsers"] = list(channel.allow_users)
        data["apiBase"] = channel.api_base or "https://api.telegram.org/bot"
    else:
        scheme = (channel.url or "").split("://", 1)[0]
        data["url"] = f"{scheme}://(hidden)"
    return data


def _channel(name: str, raw: Any) -> ChannelConfig:
    if not isinstance(raw, dict) or raw.get("kind") not in KINDS:
        raise ChannelConfigError(f"channel {name!r} in the configuration has no valid kind")
    if raw["kind"] == "telegram":
        users = raw.get("allowUsers")
        if not isinstance(users, list) or not all(
            isinstance(u, int) and not isinstance(u, bool) for u in users
        ):
            raise ChannelConfigError(f"channel {name!r} has no valid allowUsers list")
        return ChannelConfig(
            name,
            "telegram",
            token=str(raw.get("token") or ""),
            chat=str(raw.get("chat") or ""),
            allow_users=tuple(users),
            api_base=raw.get("apiBase") if isinstance(raw.get("apiBase"), str) else None,
            added_at=_int(raw.get("addedAt")),
        )
    return ChannelConfig(
        name, "notify", url=str(raw.get("url") or ""), added_at=_int(raw.get("addedAt"))
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def load(home: Path) -> Channels:
    """The configuration of `home` (empty when there is none)."""
    path = channels_dir(home) / CONFIG_NAME
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return Channels()
    except OSError as exc:
        raise ChannelConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ChannelConfigError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = json.loads(raw)
    except ValueError:
        raise ChannelConfigError(
            f"{path} is not JSON; fix it or remove it and add the channels again"
        ) from None
    if not isinstance(data, dict) or data.get("schema") != CONFIG_SCHEMA:
        raise ChannelConfigError(f"{path} is not a {CONFIG_SCHEMA} configuration")
    found = Channels()
    for name, item in (data.get("channels") or {}).items():
        found.channels[check_name(str(name), "channel")] = _channel(str(name), item)
    for name, item in (data.get("audiences") or {}).items():
        seats = item.get("channels") if isinstance(item, dict) else None
        if not isinstance(seats, list) or not all(isinstance(s, str) for s in seats):
            raise ChannelConfigError(f"audience {name!r} in {path} has no channels list")
        found.audiences[check_name(str(name), "audience")] = Audience(str(name), tuple(seats))
    return found


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise ChannelConfigError(f"{path} belongs to uid {info.st_uid}, not to you")
    if info.st_mode & 0o777 != 0o700:
        path.chmod(0o700)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Write `path` whole and atomically, mode 0600, in its 0700 directory."""
    folder = _private_dir(path.parent)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save(home: Path, config: Channels) -> None:
    """Store `config` as the configuration of `home`."""
    if len(config.channels) > MAX_CHANNELS or len(config.audiences) > MAX_AUDIENCES:
        raise ChannelConfigError(
            f"at most {MAX_CHANNELS} channels and {MAX_AUDIENCES} audiences; remove some first"
        )
    text = json.dumps(config.to_json(), indent=2, sort_keys=True) + "\n"
    write_private(channels_dir(home) / CONFIG_NAME, text.encode())


def seats_for(home: Path, audience: str | None) -> tuple[str, ...]:
    """The seats the audience `audience` (None: the default one) names now; the origin
    session and the page when the configuration cannot be read. The server records them in
    a decision's request when it opens (a later change of the audience does not move an
    open decision)."""
    try:
        return load(home).audience(audience).seats
    except ChannelConfigError:
        return BUILTIN_SEATS


def seat_of(config: Channels, seat: str) -> str:
    """The stored form of one `--channels` item: `pi`, `web`, or a configured channel's
    name (written `NAME` or `KIND:NAME`)."""
    if seat in BUILTIN_SEATS:
        return seat
    kind, _, name = seat.rpartition(":")
    channel = config.channels.get(name)
    if channel is None or (kind and kind != channel.kind):
        known = ", ".join([*BUILTIN_SEATS, *sorted(config.channels)])
        raise ChannelConfigError(
            f"{seat[:60]!r} is no channel: use pi, web or a channel of 'pi-workflows channel"
            f" list' ({known})"
        )
    return name
