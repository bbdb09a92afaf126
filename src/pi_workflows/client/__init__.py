"""The Python client of a pi-workflows server: speaks client protocol v1 over the Unix socket.

Layout:

- `paths`: where the state directory and the socket are (the same rule as the store's).
- `projects`: a workflow path and the project, resolved from the caller's directory (the
  CLI uses the same functions).
- `connection`: one blocking connection: connect, check the hello, exchange one request.
- `autostart`: `ensure_server`, which starts a detached server when none answers.
- `operations`: what each method sends and how it reads the answers, written once as
  programs both clients run, and `Receipt`.
- `sync_client`: `Client`, one method per operation, with durable retries; `run_methods`
  (start, wait, result, history, logs, watches) and `interactions` are mixed in.
- `async_client`: `AsyncClient`, the same surface for asyncio programs (`async_connection`);
  the async twins of the mixins sit next to the blocking ones.
- `watch`: `Watch` and `AsyncWatch`, server-pushed run and run-list views on a connection of
  their own.
- `payloads`: payloads and run-status sets shared by both clients.
- `errors`: `ClientError` and its subclasses.

This package imports only `pi_workflows.protocol` among internal packages (import-linter
enforces it); it never opens the database. `AsyncClient` is imported on first use, so a
blocking program (the CLI) never loads asyncio.
"""

from typing import TYPE_CHECKING, Any

from pi_workflows.client.autostart import ServerInfo, ensure_server, server_command
from pi_workflows.client.connection import Connection
from pi_workflows.client.errors import (
    ClaimLostError,
    ClientError,
    CommandError,
    ConflictError,
    ConnectionLostError,
    InputTooLargeError,
    InvalidPayloadError,
    NotFoundError,
    OtherUserServerError,
    ProtocolMismatchError,
    RejectedError,
    RequestTooLargeError,
    RunEnvironmentError,
    RunFailedError,
    ServerProtocolError,
    ServerStartError,
    ServerUnavailableError,
    StopTimeoutError,
    UnavailableError,
    WaitTimeoutError,
    WatchUnavailableError,
)
from pi_workflows.client.interactions import AsyncSessionWatch, SessionWatch
from pi_workflows.client.operations import JsonObject, Receipt
from pi_workflows.client.paths import log_path, socket_path, state_home
from pi_workflows.client.payloads import SETTLED_STATUSES, TERMINAL_STATUSES
from pi_workflows.client.projects import find_project, resolve_project, workflow_spec
from pi_workflows.client.sync_client import MAX_RETRIES, READ_OPERATIONS, Client
from pi_workflows.client.watch import AsyncWatch, Watch

if TYPE_CHECKING:
    from pi_workflows.client.async_client import AsyncClient

__all__ = [
    # the client
    "Client",
    "AsyncClient",
    "Watch",
    "AsyncWatch",
    "SessionWatch",
    "AsyncSessionWatch",
    "Receipt",
    "TERMINAL_STATUSES",
    "SETTLED_STATUSES",
    "JsonObject",
    "MAX_RETRIES",
    "READ_OPERATIONS",
    # starting and reaching a server
    "ensure_server",
    "server_command",
    "ServerInfo",
    "Connection",
    "state_home",
    "socket_path",
    "log_path",
    # workflow paths and projects, as the CLI resolves them
    "find_project",
    "resolve_project",
    "workflow_spec",
    # errors
    "ClientError",
    "CommandError",
    "RejectedError",
    "ConflictError",
    "NotFoundError",
    "UnavailableError",
    "ClaimLostError",
    "ServerUnavailableError",
    "OtherUserServerError",
    "ServerStartError",
    "ProtocolMismatchError",
    "ServerProtocolError",
    "ConnectionLostError",
    "StopTimeoutError",
    "RequestTooLargeError",
    "InputTooLargeError",
    "RunEnvironmentError",
    "InvalidPayloadError",
    "WaitTimeoutError",
    "RunFailedError",
    "WatchUnavailableError",
]


def __getattr__(name: str) -> Any:
    """``AsyncClient`` on first use (it imports asyncio)."""
    if name == "AsyncClient":
        from pi_workflows.client.async_client import AsyncClient  # noqa: PLC0415

        globals()[name] = AsyncClient
        return AsyncClient
    raise AttributeError(f"module 'pi_workflows.client' has no attribute {name!r}")
