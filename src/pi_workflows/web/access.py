"""The page's access secret and the tokens derived from it.

Owns `<state dir>/ui-secret`: 32 random bytes, created once with mode 0600 (O_EXCL, so two
processes never write two secrets), refused when another user could read it. The URL
`pi-workflows ui` prints carries the secret; the page exchanges it for a session cookie
whose value is an HMAC of the secret (so the cookie never reveals the secret), and forms
carry a CSRF token that is another HMAC of it. Both change when the secret file is removed
(a new secret is made at the next `ui`), which signs every browser out.

Pure functions and one file; imports no web framework, so `pi-workflows ui` uses it too.
The secret is never logged, printed (except in the one URL line of `ui`) or put in a view.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path
from typing import Final

from pi_workflows.web.errors import SecretFileError

__all__ = [
    "SECRET_NAME",
    "cookie_value",
    "csrf_token",
    "load_or_create_secret",
    "matches",
    "secret_text",
]

SECRET_NAME: Final = "ui-secret"  # noqa: S105 - a file name, not a secret
"""The secret file, directly inside the state directory (mode 0600)."""

_SECRET_BYTES: Final = 32


def load_or_create_secret(home: Path) -> bytes:
    """The state directory's page secret, made now (mode 0600) if there is none.

    Raises `SecretFileError` when the file exists but is not a regular file of this user
    with no access for others, or does not hold a secret."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = home / SECRET_NAME
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return _read(path)
    try:
        os.write(fd, secrets.token_bytes(_SECRET_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    return _read(path)


def _read(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise SecretFileError(f"cannot read the page secret {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise SecretFileError(f"{path} is not a file of this user; remove it and run ui again")
        if info.st_mode & 0o077:
            raise SecretFileError(
                f"{path} can be read by other users; remove it and run ui again (a new"
                " secret is made, and browsers sign in again with the new URL)"
            )
        data = os.read(fd, _SECRET_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != _SECRET_BYTES:
        raise SecretFileError(f"{path} does not hold a page secret; remove it and run ui again")
    return data


def secret_text(secret: bytes) -> str:
    """The secret as it appears in the URL (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(secret).decode("ascii").rstrip("=")


def _derived(secret: bytes, purpose: str) -> str:
    digest = hmac.new(secret, f"pi-workflows-ui:{purpose}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def cookie_value(secret: bytes) -> str:
    """The session cookie's value: an HMAC of the secret, never the secret itself."""
    return _derived(secret, "session:v1")


def csrf_token(secret: bytes) -> str:
    """The token every state-changing request carries (form field `csrf` or the header
    `X-CSRF-Token`)."""
    return _derived(secret, "csrf:v1")


def matches(given: str | None, expected: str) -> bool:
    """A constant-time comparison of a presented token with the expected one."""
    if not given or len(given) > 256:
        return False
    return hmac.compare_digest(given.encode("ascii", "replace"), expected.encode("ascii"))
