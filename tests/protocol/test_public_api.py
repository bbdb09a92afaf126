"""The package root exports exactly its public API."""

from __future__ import annotations

from pi_workflows import protocol


def test_every_exported_name_exists_and_is_listed_once() -> None:
    """Each name in `__all__` resolves, and no name is listed twice."""
    assert len(protocol.__all__) == len(set(protocol.__all__))
    for name in protocol.__all__:
        assert getattr(protocol, name) is not None, name


def test_protocol_constants_have_their_documented_values() -> None:
    """The schema strings, protocol version and frame cap match DESIGN.md."""
    assert protocol.CLIENT_SCHEMA == "pi-workflows.client.v1"
    assert protocol.RUNNER_SCHEMA == "pi-workflows.runner.v1"
    assert protocol.PROTOCOL_VERSION == 1
    assert protocol.MAX_FRAME_BYTES == 1024 * 1024
