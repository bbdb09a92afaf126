"""Frames for fuzzing the protocol decoders and the server, and the fuzz budget.

Frames are bytes: valid envelopes, the same with one field dropped, retyped or unknown,
truncated or spliced bytes, deep nesting, oversized values, invalid UTF-8, lone surrogate
escapes, huge numbers and plain garbage. The budget is the number of inputs per target: a
fixed modest one in `make test`, `CAMPAIGN_FUZZ_BUDGET` in campaign mode
(`python -m campaign --fuzz N`), which also collects the tallies the tests append to
`CAMPAIGN_FUZZ_TALLY`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from pi_workflows.protocol import CLIENT_SCHEMA, RUNNER_SCHEMA

from .strategies import json_values


def budget(default: int) -> int:
    """Inputs per target: `CAMPAIGN_FUZZ_BUDGET` when the campaign sets it, else `default`."""
    raw = os.environ.get("CAMPAIGN_FUZZ_BUDGET", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else default


def fuzz_settings(examples: int) -> settings:
    """No example database on disk, no deadline; derandomized unless the campaign runs it."""
    return settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize="CAMPAIGN_FUZZ_BUDGET" not in os.environ,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def tally(target: str, inputs: int, seconds: float) -> None:
    """Record how many inputs a target saw (for the campaign's report)."""
    path = os.environ.get("CAMPAIGN_FUZZ_TALLY")
    if path:
        with Path(path).open("a") as out:
            out.write(json.dumps({"target": target, "inputs": inputs, "seconds": seconds}) + "\n")


ids = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40) | st.text(
    "abc-_0123456789", min_size=1, max_size=12
)
names = st.from_regex(r"\A[a-z][a-zA-Z]{0,10}(\.[a-z][a-zA-Z]{0,10}){0,2}\Z")
# Operations the socket fuzzer may send with a well-formed envelope: reads and commands on
# runs that do not exist. Never server.stop, state.backup (writes a path), run.start or
# workflows.list (spawn resolver children), nor long-lived session watches.
SAFE_OPERATIONS = (
    "server.status", "run.list", "run.get", "effect.list", "effect.resolve",
    "checkpoint.answer", "decision.answer", "interaction.list", "interaction.update",
    "run.pause", "run.resume", "run.cancel", "run.restart", "blob.read", "session.get",
    "state.diagnose", "no.such", "run",
)  # fmt: skip
WRONG_TYPES = st.none() | st.booleans() | st.integers() | st.floats() | st.lists(st.integers())


@st.composite
def client_envelopes(draw: st.DrawFn, operations: st.SearchStrategy[str] | None = None) -> Any:
    """A client request as a dict, valid or nearly so."""
    envelope: dict[str, Any] = {
        "type": "request",
        "schema": CLIENT_SCHEMA,
        "requestId": draw(ids),
        "clientId": draw(ids),
        "operation": draw(operations if operations is not None else names),
    }
    if draw(st.booleans()):
        envelope["idempotencyKey"] = draw(ids | st.none())
    if draw(st.booleans()):
        envelope["runId"] = draw(ids | st.none())
    if draw(st.booleans()):
        envelope["expectedRevision"] = draw(st.integers(-3, 2**70) | st.none())
    if draw(st.booleans()):
        envelope["payload"] = draw(st.dictionaries(st.text(max_size=10), json_values, max_size=4))
    return _mutate(draw, envelope)


@st.composite
def runner_envelopes(draw: st.DrawFn) -> Any:
    """A runner message as a dict, valid or nearly so."""
    envelope: dict[str, Any] = {
        "type": draw(st.sampled_from(["message", "message", "reply", "command"])),
        "schema": RUNNER_SCHEMA,
        "runId": draw(ids),
        "generation": draw(st.integers(-2, 2**65)),
        "runnerEpoch": draw(st.integers(-2, 2**65)),
        "messageId": draw(ids),
        "kind": draw(names),
    }
    if draw(st.booleans()):
        envelope["expectedRevision"] = draw(st.integers(-3, 2**70) | st.none())
    if draw(st.booleans()):
        envelope["payload"] = draw(st.dictionaries(st.text(max_size=10), json_values, max_size=4))
    return _mutate(draw, envelope)


def _mutate(draw: st.DrawFn, envelope: dict[str, Any]) -> Any:
    """Leave the envelope valid, or break it in one of the ways a hostile peer would."""
    match draw(st.integers(0, 9)):
        case 0:  # drop a field
            envelope.pop(draw(st.sampled_from(sorted(envelope))), None)
        case 1:  # retype a field
            envelope[draw(st.sampled_from(sorted(envelope)))] = draw(WRONG_TYPES)
        case 2:  # an unknown field
            envelope[draw(st.text(min_size=1, max_size=12))] = draw(json_values)
        case 3:  # deep nesting in the payload
            depth = draw(st.integers(1, 3000))
            envelope["payload"] = {
                "deep": json.loads("[" * min(depth, 400) + "]" * min(depth, 400))
            }
            if depth > 400:
                return ("DEEP", envelope, depth)
        case 4:  # a long value
            field = draw(st.sampled_from(["requestId", "clientId", "operation", "runId"]))
            envelope[field] = "x" * draw(st.integers(150, 5000))
        case 5:  # the wrong schema or type tag
            envelope[draw(st.sampled_from(["schema", "type"]))] = draw(st.text(max_size=30))
        case _:
            pass
    return envelope


def render(value: Any) -> bytes:
    """The bytes of one frame (without its newline) for a drawn envelope."""
    if isinstance(value, tuple) and value[0] == "DEEP":
        _, envelope, depth = value
        text = json.dumps(envelope).replace('"deep": [', '"deep": ' + "[" * depth, 1)
        return text.replace("]}", "]" * depth + "}", 1).encode()
    return json.dumps(value).encode()


@st.composite
def frames(draw: st.DrawFn, envelopes: st.SearchStrategy[Any]) -> bytes:
    """One hostile frame body (never containing a newline unless it is garbage)."""
    base = render(draw(envelopes))
    match draw(st.integers(0, 11)):
        case 0:  # truncated
            return base[: draw(st.integers(0, max(0, len(base) - 1)))]
        case 1:  # random bytes spliced in
            at = draw(st.integers(0, len(base)))
            return base[:at] + draw(st.binary(max_size=16)) + base[at:]
        case 2:  # garbage
            return draw(st.binary(max_size=200))
        case 3:  # a JSON value that is not an object
            return json.dumps(draw(json_values)).encode()
        case 4:  # invalid UTF-8 inside a string
            return base.replace(b'"', b'"\xc3\x28', 1)
        case 5:  # a lone surrogate escape inside a string value
            return base.replace(b'": "', b'": "\\ud800', 1)
        case 6:  # a number out of every range
            return base.replace(b'"requestId"', b'"n": 1e999999, "requestId"', 1)
        case 7:  # duplicate keys
            return base[:-1] + b', "type": "request"}' if base.endswith(b"}") else base
        case _:
            return base
