"""The page of one run: its sections, rendered from the server's pushed view.

Runs in the page process. A run page is made of sections (`SECTIONS`): the status line
with the server's reason and next step, the actions, the waiting work (a checkpoint's
form, a decision's buttons), the graph, the details and provenance, the attempts, the
effects, the tree (children and lineage) and the history. `render_sections` makes them all
from one pushed `{run, graph}` plus the page's reads (the newest history, the lineage, the
effects' results, a session run's follow-ups); the first page load and every live update
use the same function, so a page and its updates never disagree. Each section carries a
key; the browser replaces a section only when its key moved, so a form being filled in is
not replaced by an update that did not change it.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Final

from pi_workflows.client import AsyncClient, ClientError
from pi_workflows.web import forms, graph
from pi_workflows.web.context import PageContext
from pi_workflows.web.live import Sections
from pi_workflows.web.render import section_key

__all__ = ["SECTIONS", "FormState", "Answered", "last_answer", "render_sections"]

log = logging.getLogger(__name__)

SECTIONS: Final = (
    "head", "actions", "waiting", "graph", "details", "attempts", "effects", "tree", "history"
)  # fmt: skip
"""The run page's sections, in page order."""

HISTORY_SHOWN: Final = 100
"""The newest history events a run page shows (`run history` prints them all)."""

LINEAGE_SHOWN: Final = 100
"""The runs that came from a run that its page shows as a tree."""

ACTIVE: Final = frozenset({"queued", "running", "waiting"})
ENDED: Final = frozenset({"completed", "failed", "timed_out", "cancelled"})


@dataclass
class FormState:
    """What the person sent with the answer form the page renders again: the typed
    values, and why the answer was not taken (the workflow's message, or the form's)."""

    request_id: str
    values: dict[str, str] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class Answered:
    """Who answered a run's latest checkpoint or decision, and what."""

    request_id: str | None
    node_id: str | None
    kind: str
    actor: str
    value: Any
    at: int | None


def last_answer(history: list[dict[str, Any]], outputs: dict[str, Any]) -> Answered | None:
    """The newest answer in `history` (`interaction.answered` of a decision, or the
    `interaction.submitted` that a checkpoint's node then finished with): its actor and
    value. `outputs` maps node ids to their latest output (for a checkpoint's answer)."""
    finished = {e.get("nodeId") for e in history if e.get("type") == "node.finished"}
    for event in reversed(history):
        data = event.get("data") if isinstance(event.get("data"), dict) else {}
        match event.get("type"):
            case "interaction.answered":
                return Answered(
                    data.get("requestId"), event.get("nodeId"), "decision",
                    str(event.get("actor")), data.get("choice"), event.get("at"),
                )  # fmt: skip
            case "interaction.submitted" if event.get("nodeId") in finished:
                node = event.get("nodeId")
                return Answered(
                    data.get("requestId"), node, "checkpoint", str(event.get("actor")),
                    outputs.get(str(node)), event.get("at"),
                )  # fmt: skip
    return None


async def _reads(client: AsyncClient, run_id: str, view: dict[str, Any]) -> dict[str, Any]:
    """The reads a run page needs beside the pushed view."""
    run = view["run"]
    revision = int(run.get("revision") or 0)
    history = (
        await client.call(
            "run.history",
            {"after": max(0, revision - HISTORY_SHOWN * 2), "limit": 1000},
            run_id=run_id,
        )
    ).get("events", [])[-HISTORY_SHOWN:]
    lineage: list[dict[str, Any]] = []
    if run.get("joins") or (run.get("lineage") or {}).get("forks"):
        lineage = await client.list_lineage(run_id, limit=LINEAGE_SHOWN)
    effects: dict[str, dict[str, Any]] = {}
    if run.get("effects"):
        listed = await client.call("effect.list", {"limit": 1000}, run_id=run_id)
        effects = {str(e.get("effectId")): e for e in listed.get("effects", [])}
    follow_ups: list[dict[str, Any]] = []
    if run.get("originSession"):  # only a run with an origin session can have follow-ups
        follow_ups = list((await client.follow_ups(run_id)).get("followUps", []))
    outputs: dict[str, Any] = {}
    answered = [e for e in history if e.get("type") == "interaction.submitted"]
    if answered and not run.get("waitingOn"):
        node = answered[-1].get("nodeId")
        if node:
            with contextlib.suppress(ClientError):
                outputs[str(node)] = (await client.node_output(run_id, str(node))).get("output")
    return {
        "history": history,
        "lineage": lineage,
        "effects": effects,
        "outputs": outputs,
        "follow_ups": follow_ups,
    }


def _lineage_tree(run_id: str, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs that came from `run_id` nested under the run each came from."""
    below: dict[str, list[dict[str, Any]]] = {}
    for item in found:
        below.setdefault(str(item.get("from")), []).append(item)

    def branch(parent: str, depth: int) -> list[dict[str, Any]]:
        if depth > 64:
            return []
        return [
            {**item, "below": branch(str(item["runId"]), depth + 1)}
            for item in below.get(parent, [])
        ]

    return branch(run_id, 0)


def _waiting(run: dict[str, Any], state: FormState | None) -> dict[str, Any] | None:
    """What the waiting section shows about the open request, if any."""
    waiting = run.get("waitingOn")
    if not isinstance(waiting, dict):
        return None
    request: dict[str, Any] = waiting["request"] if isinstance(waiting.get("request"), dict) else {}
    shown = {k: v for k, v in request.items() if k not in ("answerSchema", "expectedAnswer")}
    fields = (
        forms.fields_for(request.get("answerSchema")) if waiting.get("kind") == "checkpoint" else []
    )
    mine = state if state is not None and state.request_id == waiting.get("requestId") else None
    return {
        **waiting,
        "asked": shown,
        "expected": request.get("expectedAnswer"),
        "fields": fields,
        "choices": request.get("choices") if isinstance(request.get("choices"), list) else [],
        "title": request.get("title"),
        "details": request.get("details"),
        "values": mine.values if mine else {},
        "error": mine.error if mine else None,
        "omitted": "omittedBytes" in request,
        # A decision whose audience leaves out the page (docs/channels.md): shown, not offered.
        "elsewhere": _elsewhere(waiting.get("kind"), request),
    }


def _elsewhere(kind: Any, request: dict[str, Any]) -> str | None:
    """The seats a decision is addressed to when they leave out the page, else None."""
    seats = request.get("seats")
    if kind != "decision" or not isinstance(seats, list) or "web" in seats:
        return None
    return ", ".join(str(s) for s in seats) or "nobody"


def _fork_points(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [n for n in nodes if isinstance(n, dict) and (n.get("visits") or 0) > 0]


async def render_sections(
    ctx: PageContext, run_id: str, view: dict[str, Any], *, state: FormState | None = None
) -> Sections:
    """Every section of `run_id`'s page from one pushed view (plus the page's reads)."""
    async with ctx.clients.reader() as client:
        extra = await _reads(client, run_id, view)
    run, drawn = view["run"], view.get("graph") or {}
    status = str(run.get("status"))
    answered = last_answer(extra["history"], extra["outputs"])
    values = {
        "run": run,
        "status": status,
        "layout": graph.layout(drawn),
        "nodes": drawn.get("nodes", []),
        "fork_points": _fork_points(drawn.get("nodes", [])),
        "waiting": _waiting(run, state),
        "answered": answered,
        "history": extra["history"],
        "lineage": _lineage_tree(run_id, extra["lineage"]),
        "lineage_count": len(extra["lineage"]),
        "effects": [
            {**effect, **extra["effects"].get(str(effect.get("effectId")), {})}
            for effect in run.get("effects", [])
        ],
        "upgrades": [e for e in extra["history"] if e.get("type") == "run.upgraded"],
        "follow_ups": extra["follow_ups"],
        "active": status in ACTIVE,
        "ended": status in ENDED,
        "csrf": ctx.csrf,
    }
    module = ctx.env.get_template("run_sections.html").make_module(values)
    sections: Sections = {}
    for name in SECTIONS:
        html = str(getattr(module, f"sec_{name}")()).strip()
        key = section_key(html)
        if name == "waiting":  # kept while the same request is open (a form being filled in)
            waiting = run.get("waitingOn") if isinstance(run.get("waitingOn"), dict) else None
            key = (
                f"{waiting.get('requestId')}:{waiting.get('status')}"
                if waiting is not None
                else section_key(html)
            )
        sections[name] = {"key": key, "html": html}
    sections["title"] = {"key": "", "html": f"{run.get('workflow')} · {status} · {run_id}"}
    # The revision the sections show: a browser never replaces newer sections with older.
    sections["revision"] = {"key": str(int(run.get("revision") or 0)), "html": ""}
    return sections
