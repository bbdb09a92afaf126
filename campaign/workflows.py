"""The campaign's workflows: their sources, the witness helper their effect bodies use, and
the output each run must end with.

Runs in the campaign driver. The workflow files and the helper module are written into a
temporary project's `.pi/workflows/` and use only the public authoring API. Every effect
body (actions and shells, manual and idempotent) goes through `witness.body`, which records
outside the database, in `<witness dir>/witness.jsonl`, when it starts, when it applies and
when it is done, with its pid, so that the oracle can see double application and overlap:

- a body holds an exclusive `flock` on `<witness dir>/locks/<effect key>.lock` for its whole
  life (the kernel drops it however the body dies); a body that finds it held records an
  `overlap` before it waits for it;
- an idempotent body applies by creating `<witness dir>/applied/<effect key>` with `O_EXCL`
  (the outside system deduplicates by the key) and records `dedup` when it already exists;
- a manual body just applies; nothing outside deduplicates it.
"""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

WITNESS_HELPER: Final = '''
"""Effect bodies that leave witnesses outside the database (written by the campaign)."""

import fcntl
import json
import os
import sys
import time
import uuid

WITNESS_DIR = {witness_dir!r}
HELPER = {helper!r}
# The interpreter of a shell body, fixed when the campaign wrote this file: a server
# restarted by another client (the CLI's console script runs `.venv/bin/python`, pytest's
# `.venv/bin/python3`) has another `sys.executable`, and a command built from it would be a
# different request for the same idempotent effect (refused as a conflict: the run parks).
PYTHON = {python!r}


def _append(record):
    line = (json.dumps(record, separators=(",", ":"), sort_keys=True) + "\\n").encode()
    path = os.path.join(WITNESS_DIR, "witness.jsonl")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def body(form, kind, key, run, node, visit, hold_before, hold_after, value):
    """Apply one effect with witnesses; return its result."""
    base = {{"form": form, "kind": kind, "key": key, "run": run, "node": node,
             "visit": int(visit), "pid": os.getpid(), "nonce": uuid.uuid4().hex}}
    lock = open(os.path.join(WITNESS_DIR, "locks", key + ".lock"), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        _append(dict(base, e="overlap", t=time.time()))
        fcntl.flock(lock, fcntl.LOCK_EX)
    _append(dict(base, e="start", t=time.time()))
    time.sleep(float(hold_before))
    result = {{"value": value, "key": key}}
    if kind == "idempotent":
        try:
            marker = os.path.join(WITNESS_DIR, "applied", key)
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            _append(dict(base, e="dedup", t=time.time()))
        else:
            os.write(fd, json.dumps(result).encode())
            os.close(fd)
            _append(dict(base, e="applied", result=result, t=time.time()))
    else:
        _append(dict(base, e="applied", result=result, t=time.time()))
    time.sleep(float(hold_after))
    _append(dict(base, e="done", t=time.time()))
    lock.close()
    return result


def command(ctx, kind, hold_before, hold_after, value):
    """The argument list of a shell node whose command is this helper's `body`."""
    return [PYTHON, HELPER, kind, ctx.effect_key, ctx.run_id, ctx.node_id,
            str(ctx.visit), str(hold_before), str(hold_after), json.dumps(value)]


def hold(ctx, seconds):
    """Sleep inside a compute node (a window for faults), waking on cancellation."""
    ctx.cancellation.wait(float(seconds))


def tried(ctx):
    """Record one execution of the node's body (outside the database) and return how many
    executions of it this run has had, this one included."""
    path = os.path.join(WITNESS_DIR, "tries", ctx.run_id + "-" + ctx.node_id)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (ctx.attempt_id + "\\n").encode())
    finally:
        os.close(fd)
    with open(path) as lines:
        return sum(1 for _ in lines)


def self_kill(ctx, where):
    """Record (outside the database) that this body kills its own runner now, then
    SIGKILL it (a `lapse` cleanup's planned kill mid-way; attribution reads the record)."""
    _append({{"e": "selfKill", "run": ctx.run_id, "node": ctx.node_id, "where": where,
              "pid": os.getpid(), "t": time.time()}})
    os.kill(os.getpid(), 9)


def child(ctx):
    """Record (outside the database) that this run is the child its parent started for its
    item: `children/<parent>-<item>` holds every run id that ran as that child."""
    name = ctx.input["parent"] + "-" + str(ctx.input["item"])
    fd = os.open(os.path.join(WITNESS_DIR, "children", name),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (ctx.run_id + "\\n").encode())
    finally:
        os.close(fd)


def relayed(ctx, key, outcome):
    """Record (outside the database) what one `ctx.signal` of this execution returned:
    `relay/<run>-sent` holds one JSON line per send (a replay's adopted send too)."""
    line = json.dumps({{"key": key, "attempt": ctx.attempt_id, "outcome": outcome}})
    fd = os.open(os.path.join(WITNESS_DIR, "relay", ctx.run_id + "-sent"),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)


def heard(ctx, events):
    """Record (outside the database) the events a receiver's waits consumed, once per
    execution of its last node: `relay/<run>-heard` holds one JSON line each."""
    fd = os.open(os.path.join(WITNESS_DIR, "relay", ctx.run_id + "-heard"),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(events) + "\\n").encode())
    finally:
        os.close(fd)


def fixed(ticket):
    """Whether the operator fixed the outside world a `botch` run reads (`world/<ticket>`)."""
    return os.path.exists(os.path.join(WITNESS_DIR, "world", ticket))


if __name__ == "__main__":
    kind, key, run, node, visit, before, after, value = sys.argv[1:9]
    print(json.dumps(body("shell", kind, key, run, node, visit, before, after, json.loads(value))))
'''

CHAIN: Final = """
from pi_workflows import Workflow, compute, edge, switch

import witness


def init(ctx):
    return {{"acc": ctx.input["x"], "i": 0}}


def step(ctx):
    witness.hold(ctx, ctx.input["hold"])
    prev = ctx.outputs["step"] if "step" in ctx.outputs else ctx.outputs["init"]
    acc = (prev["acc"] * 31 + 7) % 1000003
    i = prev["i"] + 1
    return {{"acc": acc, "i": i, "more": i < ctx.input["n"]}}


def flaky(ctx):
    if (ctx.visit + ctx.input["x"]) % 3 == 0:
        raise RuntimeError("a planned failure, routed back by $result.outcome")
    return {{"tries": ctx.visit}}


workflow = Workflow(
    "chain",
    start="init",
    max_steps=40,
    nodes={{
        "init": compute(init),
        "step": compute(step),
        "flaky": compute(flaky),
        "done": compute(lambda ctx: {{"acc": ctx.outputs["step"]["acc"],
                                      "tries": ctx.outputs["flaky"]["tries"],
                                      "boost": ctx.settings["boost"],
                                      "change": ctx.settings_change}}),
    }},
    edges=[
        edge("init", "step"),
        switch("step", on="$.more", cases={{True: "step", False: "flaky"}}),
        switch("flaky", on="$result.outcome", cases={{"ok": "done", "failed": "flaky"}}),
    ],
    # Live settings: the operator may change `boost` while the run goes on; `done` says what
    # it saw, which the oracle compares with the change its attempt recorded.
    settings={{"type": "object", "properties": {{"boost": {{"type": "integer", "minimum": 0,
              "default": 0}}}}, "required": ["boost"]}},
)
"""

PAYMENT: Final = """
from pi_workflows import Workflow, action, checkpoint, compute, edge, manual_effect, switch

import witness


def charge(ctx):
    value = ctx.outputs["quote"]["amount"] + ctx.outputs["ask"]["tip"]
    before, after = ctx.input["hold"]
    return witness.body("action", "manual", ctx.effect_key, ctx.run_id, ctx.node_id, ctx.visit,
                        before, after, value)


workflow = Workflow(
    "{name}",
    start="quote",
    max_steps=40,
    nodes={{
        "quote": compute(lambda ctx: {{"amount": ctx.input["x"] * 3}}),
        "ask": checkpoint(lambda ctx: {{"question": "Tip?",
                                        "amount": ctx.outputs["quote"]["amount"]}}),
        "charge": action(charge, effect=manual_effect("charge"), timeout={timeout}),
        "receipt": compute(lambda ctx: {{"applied": True, "value": ctx.outputs["charge"]["value"],
                                         "amount": ctx.outputs["quote"]["amount"]}}),
        "refund": compute(lambda ctx: {{"applied": False,
                                        "amount": ctx.outputs["quote"]["amount"]}}),
    }},
    edges=[
        edge("quote", "ask"),
        edge("ask", "charge"),
        switch("charge", on="$result.outcome",
               cases={{"ok": "receipt", "failed": "refund", "timed_out": "charge"}}),
    ],
)
"""

DEPLOY: Final = """
import json

from pi_workflows import (Workflow, choice, compute, human_decision, manual_effect, shell,
                          switch)

import witness


def push(ctx):
    before, after = ctx.input["hold"]
    return witness.command(ctx, "manual", before, after, ctx.input["x"] * 5 + 1)


def shipped(ctx):
    return {{"applied": True, "value": json.loads(ctx.outputs["push"]["stdout"])["value"],
             "choice": "ship", "decidedBy": ctx.outputs["decide"]["decidedBy"]}}


workflow = Workflow(
    "{name}",
    start="decide",
    max_steps=40,
    nodes={{
        "decide": human_decision(title="Deploy?", choices=[choice("ship"), choice("hold")],
                                 on_timeout={on_timeout}, audience="ops"),
        "push": shell(push, effect=manual_effect("deploy"), timeout={timeout}),
        "shipped": compute(shipped),
        "failed": compute(lambda ctx: {{"applied": False, "choice": "ship",
                                        "decidedBy": ctx.outputs["decide"]["decidedBy"]}}),
        "held": compute(lambda ctx: {{"applied": False, "choice": "hold",
                                      "decidedBy": ctx.outputs["decide"]["decidedBy"]}}),
    }},
    edges=[
        switch("decide", on="$.choice", cases={{"ship": "push", "hold": "held"}}),
        switch("push", on="$result.outcome",
               cases={{"ok": "shipped", "failed": "failed", "timed_out": "push"}}),
    ],
)
"""

SYNC: Final = """
import json

from pi_workflows import Workflow, action, compute, idempotent_effect, shell, switch

import witness


def fetch(ctx):
    return witness.body("action", "idempotent", ctx.effect_key, ctx.run_id, ctx.node_id,
                        ctx.visit, ctx.input["fetchHold"], 0.05, ctx.input["x"] ** 2)


def store(ctx):
    # The first visit may outlast the node's timeout (a planned timed_out route).
    before = ctx.input["storeHold"] if ctx.visit == 1 else 0.1
    return witness.command(ctx, "idempotent", before, 0.1, ctx.outputs["fetch"]["value"] + 1)


workflow = Workflow(
    "sync",
    start="fetch",
    max_steps=40,
    nodes={{
        "fetch": action(fetch, effect=idempotent_effect("fetch")),
        "store": shell(store, effect=idempotent_effect("store"), timeout={timeout}),
        "gate": compute(lambda ctx: {{"retry": ctx.visit < 4}}),
        "done": compute(lambda ctx: {{
            "applied": True, "fetched": ctx.outputs["fetch"]["value"],
            "value": json.loads(ctx.outputs["store"]["stdout"])["value"]}}),
        "gaveUp": compute(lambda ctx: {{"applied": False,
                                        "fetched": ctx.outputs["fetch"]["value"]}}),
    }},
    edges=[
        switch("fetch", on="$result.outcome", cases={{"ok": "store", "failed": "fetch",
                                                      "timed_out": "fetch"}}),
        switch("store", on="$result.outcome", cases={{"ok": "done", "failed": "gate",
                                                      "timed_out": "gate"}}),
        switch("gate", on="$.retry", cases={{True: "store", False: "gaveUp"}}),
    ],
)
"""


REVIEW: Final = """
from pi_workflows import Rejected, Workflow, agent, compute, edge, switch

import witness


def check(output, ctx):
    # A window for faults while the submission is being validated in its runner.
    witness.hold(ctx, ctx.input["validateHold"])
    if not isinstance(output, dict) or output.get("score") != ctx.input["x"] * 2:
        raise Rejected("score must be twice the item")


workflow = Workflow(
    "{name}",
    start="prep",
    max_steps=40,
    nodes={{
        "prep": compute(lambda ctx: {{"item": ctx.input["x"]}}),
        "review": agent(
            prompt=lambda ctx: f"Score item {{ctx.outputs['prep']['item']}}",
            expected_output='{{"score": <twice the item>}}',
            validate=check,
            timeout={timeout},
        ),
        "done": compute(lambda ctx: {{"score": ctx.outputs["review"]["score"],
                                      "timedOut": False}}),
        "late": compute(lambda ctx: {{"score": None, "timedOut": True}}),
    }},
    edges=[
        edge("prep", "review"),
        switch("review", on="$result.outcome",
               cases={{"ok": "done", "failed": "late", "timed_out": "late"}}),
    ],
)
"""


NOTICE: Final = """
import json

from pi_workflows import (Workflow, action, compute, edge, idempotent_effect, manual_effect,
                          notify, shell, switch)

import witness


def charge(ctx):
    before, after = ctx.input["hold"]
    return witness.body("action", "manual", ctx.effect_key, ctx.run_id, ctx.node_id, ctx.visit,
                        before, after, ctx.input["x"] * 7)


def store(ctx):
    return witness.command(ctx, "idempotent", ctx.input["storeHold"], 0.1, ctx.input["x"] + 3)


workflow = Workflow(
    "notice",
    start="hello",
    max_steps=40,
    nodes={{
        # A notification, then at once a slow manual effect: the session presents and reports
        # the notification while the effect's body runs (the review's crossing).
        "hello": notify(lambda ctx: f"charging item {{ctx.input['x']}}"),
        "charge": action(charge, effect=manual_effect("notice-charge")),
        "told": notify(lambda ctx: f"charged {{ctx.outputs['charge']['value']}}"),
        "store": shell(store, effect=idempotent_effect("notice-store")),
        "gate": compute(lambda ctx: {{"retry": ctx.visit < 4}}),
        "done": compute(lambda ctx: {{
            "applied": True, "value": ctx.outputs["charge"]["value"],
            "stored": json.loads(ctx.outputs["store"]["stdout"])["value"]}}),
        "unstored": compute(lambda ctx: {{"applied": True,
                                          "value": ctx.outputs["charge"]["value"],
                                          "stored": None}}),
        "refund": compute(lambda ctx: {{"applied": False}}),
    }},
    edges=[
        edge("hello", "charge"),
        switch("charge", on="$result.outcome", cases={{"ok": "told", "failed": "refund"}}),
        edge("told", "store"),
        switch("store", on="$result.outcome", cases={{"ok": "done", "failed": "gate",
                                                      "timed_out": "gate"}}),
        switch("gate", on="$.retry", cases={{True: "store", False: "unstored"}}),
    ],
)
"""


TIMER: Final = """
from pi_workflows import (Rejected, Workflow, action, compute, edge, idempotent_effect, retry,
                          seconds, sleep, switch, wait_event)

import witness


class Transient(Exception):
    pass


class RateLimited(Transient):
    pass


def call(ctx):
    # The run's first `fails` executions fail (counted outside the database), so the retry
    # policy tries again after a durable delay, and parks when a round of tries runs out.
    # The policy retries by class (a subclass of Transient), so a try whose runner was
    # killed after its failure was recorded must still be classified as RateLimited.
    if witness.tried(ctx) <= ctx.input["fails"]:
        raise RateLimited("a planned failure, tried again by the retry policy")
    before, after = ctx.input["hold"]
    return witness.body("action", "idempotent", ctx.effect_key, ctx.run_id, ctx.node_id,
                        ctx.visit, before, after, ctx.input["x"] * 11)


def check(data, ctx):
    witness.hold(ctx, ctx.input["validateHold"])
    if not isinstance(data, dict) or data.get("x") != ctx.input["x"]:
        raise Rejected("x must be the run's")


workflow = Workflow(
    "{name}",
    start="nap",
    max_steps=40,
    nodes={{
        "nap": sleep(until=lambda ctx: ctx.input["nap"]),
        "call": action(call, effect=idempotent_effect("timer-call"),
                       retry=retry(attempts={attempts}, delay=seconds(0.4), backoff=1.5,
                                   jitter=0.2, on=(Transient, "timed_out"),
                                   never=(ValueError,), on_exhausted="pause")),
        "go": wait_event("go", timeout={timeout}, validate=check),
        "done": compute(lambda ctx: {{"value": ctx.outputs["call"]["value"],
                                      "event": ctx.outputs["go"]["x"],
                                      "lateMs": ctx.outputs["nap"]["lateMs"],
                                      "timedOut": False}}),
        "late": compute(lambda ctx: {{"value": ctx.outputs["call"]["value"], "event": None,
                                      "timedOut": True}}),
    }},
    edges=[
        edge("nap", "call"),
        edge("call", "go"),
        switch("go", on="$result.outcome", cases={{"ok": "done", "timed_out": "late"}}),
    ],
)
"""

LEAFC: Final = """
from pi_workflows import Workflow, action, compute, edge, idempotent_effect

import witness


def work(ctx):
    witness.child(ctx)
    witness.hold(ctx, ctx.input["hold"])
    return {{"item": ctx.input["item"]}}


def apply(ctx):
    return witness.body("action", "idempotent", ctx.effect_key, ctx.run_id, ctx.node_id,
                        ctx.visit, 0.05, 0.05, ctx.input["x"] * 13 + ctx.input["item"])


workflow = Workflow(
    "leafc",
    start="work",
    max_steps=20,
    nodes={{
        "work": compute(work),
        "apply": action(apply, effect=idempotent_effect("leafc-apply")),
        "done": compute(lambda ctx: {{"value": ctx.outputs["apply"]["value"]}}),
    }},
    edges=[edge("work", "apply"), edge("apply", "done")],
)
"""

TREE: Final = """
from pi_workflows import Workflow, compute, fan_out, switch


def child_input(ctx, item):
    return {{"x": ctx.input["x"], "item": item, "parent": ctx.run_id,
             "hold": ctx.input["hold"]}}


workflow = Workflow(
    "tree",
    start="spread",
    max_steps=20,
    nodes={{
        # Children of `leafc`, two at a time and at most two starts a second (the rate's
        # window is kept in the database), joined durably; each applies an idempotent
        # effect of its own (its key holds its own run id).
        "spread": fan_out("leafc", items=lambda ctx: list(range(ctx.input["n"])),
                          input=child_input, concurrency=2, rate="2/s"),
        "sum": compute(lambda ctx: {{"total": sum(c["output"]["value"]
                                                  for c in ctx.outputs["spread"]),
                                     "children": len(ctx.outputs["spread"])}}),
        "broken": compute(lambda ctx: {{"total": None,
                                        "error": ctx.results["spread"]["error"]}}),
    }},
    edges=[switch("spread", on="$result.outcome", cases={{"ok": "sum", "failed": "broken"}})],
)
"""

NEST: Final = """
from pi_workflows import Workflow, compute, subworkflow, switch

workflow = Workflow(
    "{name}",
    start="inner",
    max_steps=20,
    nodes={{
        # One child run of `{child}` (`nest` -> `midnest` -> `chain`: three levels, so a
        # tree pause must reach a grandchild), whose output is this run's.
        "inner": subworkflow("{child}", input=lambda ctx: {{"x": ctx.input["x"],
                                                          "n": ctx.input["n"],
                                                          "hold": ctx.input["hold"]}}),
        "done": compute(lambda ctx: dict(ctx.outputs["inner"])),
        "broken": compute(lambda ctx: {{"error": ctx.results["inner"]["error"]}}),
    }},
    edges=[switch("inner", on="$result.outcome",
                  cases={{"ok": "done", "failed": "broken", "timed_out": "broken"}})],
)
"""

MEND: Final = """
from pi_workflows import Workflow, action, checkpoint, compute, edge, idempotent_effect

import witness

# The operator rewrites this line (to the next version) while a run waits on `ask`, then
# upgrades the run: `ask` is asked again from the new code and `done` runs the new code.
VERSION = {version}


def prepare(ctx):
    return witness.body("action", "idempotent", ctx.effect_key, ctx.run_id, ctx.node_id,
                        ctx.visit, 0.05, 0.05, ctx.input["x"] * 17)


workflow = Workflow(
    "mend",
    start="prepare",
    max_steps=20,
    nodes={{
        "prepare": action(prepare, effect=idempotent_effect("mend-prepare")),
        "ask": checkpoint(lambda ctx: {{"question": "Tip?", "version": VERSION}}),
        "done": compute(lambda ctx: {{"version": VERSION,
                                      "asked": ctx.outputs["ask"]["version"],
                                      "tip": ctx.outputs["ask"]["tip"],
                                      "value": ctx.outputs["prepare"]["value"]}}),
    }},
    edges=[edge("prepare", "ask"), edge("ask", "done")],
)
"""

MEND_VERSIONS: Final = (1, 2)
"""The version `mend` is written with, and the one the operator changes it to."""

TIMER_ATTEMPTS: Final = 3
"""Tries per round of the `timer` workflows' retry policy (`retry(attempts=...)`)."""


LAPSE: Final = """
from pi_workflows import Workflow, action, compute, edge, idempotent_effect

import witness


def work(ctx):
    witness.hold(ctx, ctx.input["work"])  # longer than the run deadline: it crosses a runner
    return {{"x": ctx.input["x"]}}


def release(ctx):
    # The cleanup node: run once after the run deadline (or a cancel), with the reason. On
    # its first execution it may kill its own runner, before or after its effect applied.
    first = witness.tried(ctx) == 1
    if first and ctx.input["kill"] == "before":
        witness.self_kill(ctx, "before")
    hold = ctx.input["hold"]
    result = witness.body("action", "idempotent", ctx.effect_key, ctx.run_id, ctx.node_id,
                          ctx.visit, hold[0], hold[1],
                          {{"x": 19 * ctx.input["x"], "reason": ctx.cancel_reason}})
    if first and ctx.input["kill"] == "after":
        witness.self_kill(ctx, "after")
    return result


workflow = Workflow(
    "lapse",
    start="work",
    deadline={deadline},
    on_cancel="release",
    nodes={{
        "work": compute(work),
        "done": compute(lambda ctx: dict(ctx.outputs["work"])),
        "release": action(release, effect=idempotent_effect("lapse-release")),
    }},
    edges=[edge("work", "done")],
)
"""


RELAY: Final = """
from pi_workflows import Workflow, compute, edge

import witness


def send(ctx):
    # Two events to the receiver, one key each, from one visit, with windows for faults
    # before, between and after the sends: a killed runner replays the visit, whose sends
    # must adopt what an earlier execution sent (never a second event of one key). A
    # receiver that has ended (a cancel) refuses them: the node goes on with the refusal.
    # On its first execution it may kill its own runner (planned: after the first send, or
    # after both), so that a replay of the visit must adopt what was sent.
    first = witness.tried(ctx) == 1
    holds = ctx.input["hold"]
    sent, refused = [], None
    for number in (1, 2):
        witness.hold(ctx, holds[number - 1])
        key = "relay-" + str(number)
        data = {{"x": ctx.input["x"], "n": number, "from": ctx.run_id}}
        try:
            result = ctx.signal(ctx.input["to"], "relay", data, key=key)
        except ValueError as exc:
            witness.relayed(ctx, key, {{"refused": str(exc)}})
            refused = str(exc)
            break
        witness.relayed(ctx, key, result)
        sent.append(result["signalId"])
        if first and ctx.input["kill"] == number:
            witness.self_kill(ctx, "afterSend" + str(number))
    witness.hold(ctx, holds[2])
    return {{"sent": sent, "refused": refused}}


workflow = Workflow(
    "relay",
    start="send",
    max_steps=10,
    nodes={{
        "send": compute(send),
        "done": compute(lambda ctx: dict(ctx.outputs["send"])),
    }},
    edges=[edge("send", "done")],
)
"""

HARK: Final = """
from pi_workflows import Workflow, compute, edge, wait_event

import witness


def heard(ctx):
    events = [ctx.outputs["first"], ctx.outputs["second"]]
    witness.heard(ctx, events)
    return {{"n": [e["n"] for e in events], "x": [e["x"] for e in events],
             "from": sorted({{e["from"] for e in events}})}}


workflow = Workflow(
    "hark",
    start="first",
    max_steps=10,
    nodes={{
        # The two events a `relay` run sends it (ctx.signal), oldest first.
        "first": wait_event("relay"),
        "second": wait_event("relay"),
        "done": compute(heard),
    }},
    edges=[edge("first", "second"), edge("second", "done")],
)
"""

BOTCH: Final = """
from pi_workflows import Workflow, action, compute, edge, idempotent_effect, manual_effect

import witness


def prepare(ctx):
    return witness.body("action", "idempotent", ctx.effect_key, ctx.run_id, ctx.node_id,
                        ctx.visit, 0.05, 0.05, ctx.input["x"] * 23)


def charge(ctx):
    before, after = ctx.input["hold"]
    return witness.body("action", "manual", ctx.effect_key, ctx.run_id, ctx.node_id, ctx.visit,
                        before, after, ctx.input["x"] * 29)


def check(ctx):
    # Fails by design until the operator fixes the world it reads (a file outside the
    # database); with no failed route the run ends failed, and `run retry` runs it again.
    witness.hold(ctx, ctx.input["checkHold"])
    if not witness.fixed(ctx.input["ticket"]):
        raise RuntimeError("the ledger is closed (a planned failure: retry once it is open)")
    return {{"open": True}}


workflow = Workflow(
    "botch",
    start="prepare",
    max_steps=10,
    nodes={{
        "prepare": action(prepare, effect=idempotent_effect("botch-prepare")),
        "charge": action(charge, effect=manual_effect("botch-charge")),
        "check": compute(check),
        "done": compute(lambda ctx: {{"prepared": ctx.outputs["prepare"]["value"],
                                      "charged": ctx.outputs["charge"]["value"]}}),
    }},
    edges=[edge("prepare", "charge"), edge("charge", "check"), edge("check", "done")],
)
"""

BOTCH_FAILURE: Final = "the ledger is closed"
"""What the error of a `botch` run that failed by design says."""


RUN_DEADLINE_SECONDS: Final = 2.0
"""The run deadline of `lapse` (`Workflow(deadline=)`); its `work` node holds longer."""
RUN_DEADLINES: Final = {"lapse": RUN_DEADLINE_SECONDS}
"""Workflows with a run deadline (seconds): the server ends their runs at it."""
CLEANUP_NODES: Final = {"lapse": "release"}
"""The cleanup node (`on_cancel`) of each workflow that has one."""


@dataclass(frozen=True)
class Variant:
    """One workflow file the campaign writes: its name, template and template values."""

    name: str
    template: str
    values: dict[str, str]


VARIANTS: Final = (
    Variant("chain", CHAIN, {}),
    Variant("payment", PAYMENT, {"name": "payment", "timeout": "None"}),
    # A node timeout shorter than some holds: the server kills the runner at the deadline.
    Variant("payment-t", PAYMENT, {"name": "payment-t", "timeout": "2.0"}),
    Variant("deploy", DEPLOY, {"name": "deploy", "on_timeout": "None", "timeout": "None"}),
    # A decision that defaults to "hold" and a command the runner kills at its deadline.
    Variant(
        "deploy-t", DEPLOY, {"name": "deploy-t", "on_timeout": '(3.0, "hold")', "timeout": "2.0"}
    ),
    Variant("sync", SYNC, {"timeout": "2.0"}),
    # An agent step the operator submits (sometimes wrongly first) through interaction.submit.
    Variant("review", REVIEW, {"name": "review", "timeout": "None"}),
    # The same with a deadline that can pass before the operator submits: the timeout route.
    Variant("review-t", REVIEW, {"name": "review-t", "timeout": "4.0"}),
    # Notifications around slow effects, always in a run with an origin session.
    Variant("notice", NOTICE, {}),
    # A durable sleep, a flaky action under a retry policy that pauses when a round of tries
    # runs out, and an event the operator sends (sometimes early, wrongly or twice).
    Variant("timer", TIMER, {"name": "timer", "timeout": "None", "attempts": str(TIMER_ATTEMPTS)}),
    # The same with an event wait that times out after 3 s: the timeout route.
    Variant(
        "timer-t",
        TIMER,
        {"name": "timer-t", "timeout": "seconds(3)", "attempts": str(TIMER_ATTEMPTS)},
    ),
    # Composition: a fan_out of `leafc` children, and a subworkflow of a subworkflow of
    # `chain`.
    Variant("leafc", LEAFC, {}),
    Variant("tree", TREE, {}),
    Variant("nest", NEST, {"name": "nest", "child": "midnest"}),
    Variant("midnest", NEST, {"name": "midnest", "child": "chain"}),
    # Lineage: a run whose workflow the operator changes while it waits, then upgrades.
    Variant("mend", MEND, {"version": str(MEND_VERSIONS[0])}),
    # A run deadline that always crosses a working runner, and the cleanup node it runs
    # (which may kill its own runner mid-way once).
    Variant("lapse", LAPSE, {"deadline": str(RUN_DEADLINE_SECONDS)}),
    # Runs that message runs: a `relay` run's node sends two events (`ctx.signal`) to a
    # `hark` run that waits for them.
    Variant("relay", RELAY, {}),
    Variant("hark", HARK, {}),
    # A run that fails by design until the world it reads is fixed: `run retry` of it.
    Variant("botch", BOTCH, {}),
)
CHILD_ONLY: Final = frozenset({"leafc", "midnest"})
"""Workflows only ever started as another run's children (never planned on their own)."""
COMPOSITION: Final = frozenset({"tree", "nest"})
"""Workflows whose runs start child runs."""
WORKFLOW_NAMES: Final = tuple(v.name for v in VARIANTS if v.name not in CHILD_ONLY)
MANUAL_NODES: Final = {
    "payment": "charge",
    "payment-t": "charge",
    "deploy": "push",
    "deploy-t": "push",
    "notice": "charge",
}
"""The node of each workflow whose body is a manual effect."""
NODE_DEADLINES: Final = {
    ("payment-t", "charge"): 2.0,
    ("deploy-t", "push"): 2.0,
    ("sync", "store"): 2.0,
    ("review-t", "review"): 4.0,
}
"""Nodes with a deadline (seconds): the server (or the runner) stops their body at it."""
SHELL_NODES: Final = frozenset({"push", "store"})
"""Nodes whose body is a shell command (their output is `{exitCode, stdout, stderr}`)."""


def write_project(project: Path, witness_dir: Path) -> None:
    """Write every workflow and the witness helper into `<project>/.pi/workflows/`."""
    flows = project / ".pi" / "workflows"
    flows.mkdir(parents=True, exist_ok=True)
    for sub in ("locks", "applied", "tries", "children", "relay", "world"):
        (witness_dir / sub).mkdir(parents=True, exist_ok=True)
    helper = flows / "witness.py"
    helper.write_text(
        WITNESS_HELPER.lstrip().format(
            witness_dir=str(witness_dir), helper=str(helper), python=sys.executable
        )
    )
    for variant in VARIANTS:
        source = textwrap.dedent(variant.template).lstrip().format(**variant.values)
        (flows / f"{variant.name}.workflow.py").write_text(source)


def write_mend(project: Path, version: int) -> None:
    """Change `mend`'s code to `version` as a person would save it: the new bytes appear at
    once (a temporary file renamed over the old), so no runner ever reads half a file."""
    flows = project / ".pi" / "workflows"
    source = textwrap.dedent(MEND).lstrip().format(version=version)
    temporary = flows / ".mend.workflow.py.tmp"
    temporary.write_text(source)
    temporary.replace(flows / "mend.workflow.py")


def chain_output(x: int, n: int) -> dict[str, Any]:
    """What a `chain` run with input `x`, `n` completes with (besides the live settings its
    `done` node saw, `boost` and `change`, which the oracle checks against the ledger)."""
    acc = x
    for _ in range(n):
        acc = (acc * 31 + 7) % 1000003
    tries = 2 if (1 + x) % 3 == 0 else 1
    return {"acc": acc, "tries": tries}


def tree_total(x: int, n: int) -> int:
    """What a `tree` run with input `x`, `n` completes with as its `total`."""
    return sum(x * 13 + item for item in range(n))


def manual_value(workflow: str, run_input: dict[str, Any]) -> int:
    """The value a manual body of `workflow` applies (what its witness must show)."""
    x = int(run_input["x"])
    if workflow.startswith("payment"):
        return x * 3 + tip(x)
    if workflow == "notice":
        return x * 7
    if workflow.startswith("timer"):
        return x * 11
    if workflow == "botch":
        return x * 29
    return x * 5 + 1


def tip(x: int) -> int:
    """The operator's checkpoint answer for a payment of input `x`: `{"tip": tip(x)}`."""
    return x % 7
