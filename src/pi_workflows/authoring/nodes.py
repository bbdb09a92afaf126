"""Node kinds and their constructors: the vocabulary of a workflow graph.

Each node is a frozen dataclass with a ``kind`` field. Constructors only assemble data and
remember the line that called them (``locations.remember``); every semantic check (effects
present, timeouts positive, choices declared, a retry where none may be, ...) runs when the
``Workflow`` is built, so errors can name the workflow and the node and all of a file's
problems are reported at once. A constructor raises at once only for an argument of the
wrong shape that no node could hold (``on_timeout`` not a pair, exit codes not a list, a
notify kind that does not exist). Nothing here runs a callback or touches the outside
world.

Output shapes the runner produces for the non-callback kinds (documented for authors in
``docs/authoring.md``):

- ``shell``: ``{"exitCode": int, "stdout": str, "stderr": str}``
- ``notify``: ``{"message": str, "kind": "progress" | "final"}``
- ``human_decision``: ``{"choice": str, "decidedBy": "person" | "timeout"}``
- ``agent`` with ``assistant_message()``: the reply text (a JSON string)
- ``agent`` and ``checkpoint``: the submitted JSON value (with ``output=``/``answer=``, the
  value the schema accepted: a Pydantic model's ``model_dump(mode="json")``)
- ``sleep``: ``{"until": ISO-8601 time, "lateMs": int}``
- ``wait_event``: the ``data`` the event was sent with
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeAlias, TypeVar

from pi_workflows.authoring.composition import FanOutNode, SubworkflowNode
from pi_workflows.authoring.context import ActionContext, NodeContext
from pi_workflows.authoring.contracts import Contract, contract
from pi_workflows.authoring.effects import Effect
from pi_workflows.authoring.errors import Rejected
from pi_workflows.authoring.kinds import NodeKind
from pi_workflows.authoring.locations import defer, remember
from pi_workflows.authoring.retries import RetryPolicy
from pi_workflows.authoring.values import JsonValue, minutes


class NotifyKind(StrEnum):
    """Whether a notify message reports progress or the run's final word."""

    PROGRESS = "progress"
    FINAL = "final"


AGENT_DEFAULT_TIMEOUT: float = minutes(15)
"""The default deadline of an agent step, in seconds."""

NodeCallback: TypeAlias = Callable[[NodeContext], object]
"""A sync or async callback taking ``ctx``; its (awaited) return value is used."""
ActionCallback: TypeAlias = Callable[[ActionContext], object]
"""A sync or async callback taking an ``ActionContext`` (it has ``effect_key``)."""
Validator: TypeAlias = Callable[[Any, NodeContext], object]
"""``validate(output, ctx)``: return to accept, raise ``Rejected(message)`` to refuse."""
TextSpec: TypeAlias = str | Callable[[NodeContext], object]
"""A string, or a sync or async callback returning one."""

EVENT_NAME_PATTERN_TEXT = r"\A[A-Za-z][A-Za-z0-9_.:-]{0,127}\Z"
"""What an event name may be (``wait_event`` here, ``run.signal`` in the server, which keeps
its own copy, ``protocol.SIGNAL_NAME_PATTERN``; a test keeps the two equal)."""
EVENT_NAME_PATTERN = re.compile(EVENT_NAME_PATTERN_TEXT)


@dataclass(frozen=True, kw_only=True)
class ComputeNode:
    """Pure data shaping. May run again after a crash, so it must not change the world."""

    run: NodeCallback
    timeout: float | None = None
    retry: RetryPolicy | None = None
    # A routing node over the run's settings (``settings_route``): evaluated again when the
    # settings change between its attempt's start and the commit of its route.
    settings_route: bool = False
    kind: NodeKind = dataclasses.field(default=NodeKind.COMPUTE, init=False)


@dataclass(frozen=True, kw_only=True)
class ActionNode:
    """A side effect through ``run(ctx)``, guarded by its ``effect`` declaration."""

    run: ActionCallback
    effect: Effect | None
    timeout: float | None = None
    retry: RetryPolicy | None = None
    kind: NodeKind = dataclasses.field(default=NodeKind.ACTION, init=False)


@dataclass(frozen=True, kw_only=True)
class ShellNode:
    """A command run as an action: own process group, bounded output, killed on timeout.

    ``command`` is an argument list or a callback returning one (never a shell string).
    An exit code outside ``allow_exit_codes`` fails the node.
    """

    command: Sequence[str] | ActionCallback
    effect: Effect | None
    allow_exit_codes: frozenset[int] = frozenset({0})
    timeout: float | None = None
    retry: RetryPolicy | None = None
    # Variables added to (a value) or removed from (None) the run's environment for this
    # command only: (name, value) pairs sorted by name, or a callback returning a mapping.
    # None: the run's environment as it is.
    env: tuple[tuple[str, str | None], ...] | ActionCallback | None = None
    kind: NodeKind = dataclasses.field(default=NodeKind.SHELL, init=False)


@dataclass(frozen=True, kw_only=True)
class NotifyNode:
    """A durable message to the session that started the run. Never starts a model turn."""

    message: TextSpec
    notify_kind: NotifyKind = NotifyKind.PROGRESS
    audience: str | None = None
    """The audience the message also goes to (docs/channels.md); None: the default one."""
    kind: NodeKind = dataclasses.field(default=NodeKind.NOTIFY, init=False)

    @property
    def timeout(self) -> float | None:
        """Notify nodes have no deadline."""
        return None


@dataclass(frozen=True)
class AssistantMessage:
    """Expected-output marker: the step's output is the model's visible reply text."""


@dataclass(frozen=True, kw_only=True)
class AgentNode:
    """An interactive model step, completed by a ``workflow`` tool submission.

    With ``expected_output=assistant_message()`` the visible reply becomes the output
    instead, and ``validate`` is not allowed (a reply cannot be sent back for correction).
    ``route_field`` and ``routes`` are set by ``decision`` so the graph check can demand a
    switch that covers every route. ``output`` is the typed contract a submission must
    match before ``validate`` sees it; ``expected_output`` then ends with its schema.
    """

    prompt: TextSpec
    expected_output: str | AssistantMessage
    validate: Validator | None = None
    timeout: float | None = AGENT_DEFAULT_TIMEOUT
    allowed_tools: tuple[str, ...] | None = None
    route_field: str | None = None
    routes: tuple[str, ...] = ()
    output: Contract | None = None
    kind: NodeKind = dataclasses.field(default=NodeKind.AGENT, init=False)


@dataclass(frozen=True, kw_only=True)
class CheckpointNode:
    """Waits for an ordinary answer, from a person or the model.

    ``request`` is shown to whoever answers: a JSON object with a ``"question"`` string,
    a plain string (shorthand for ``{"question": ...}``), or a callback returning either.
    ``answer`` is the typed contract an answer must match before ``validate`` sees it.
    ``for_person`` makes it a question only a person answers: it never reaches the model.
    """

    request: JsonValue | NodeCallback
    validate: Validator | None = None
    timeout: float | None = None
    answer: Contract | None = None
    for_person: bool = False
    kind: NodeKind = dataclasses.field(default=NodeKind.CHECKPOINT, init=False)


@dataclass(frozen=True)
class Choice:
    """One answer a person can give to a ``human_decision``."""

    id: str
    label: str
    description: str | None = None


@dataclass(frozen=True)
class OnTimeout:
    """The choice a ``human_decision`` takes by itself once ``after`` seconds have passed."""

    after: float
    choice: str


@dataclass(frozen=True, kw_only=True)
class HumanDecisionNode:
    """A protected checkpoint only a person can answer; the model-facing tool refuses it.

    The first valid answer, the timeout default or a cancellation wins, exactly once.
    """

    title: TextSpec
    choices: tuple[Choice, ...]
    on_timeout: OnTimeout | None = None
    details: TextSpec | None = None
    audience: str | None = None
    """The audience asked (docs/channels.md); None: the origin session and the web page."""
    kind: NodeKind = dataclasses.field(default=NodeKind.HUMAN_DECISION, init=False)

    @property
    def timeout(self) -> float | None:
        """The deadline after which the timeout default is chosen, if any."""
        return self.on_timeout.after if self.on_timeout is not None else None

    @property
    def choice_ids(self) -> tuple[str, ...]:
        """The declared choice ids, in order."""
        return tuple(c.id for c in self.choices)


@dataclass(frozen=True, kw_only=True)
class SleepNode:
    """Waits until a time with no runner, no claim and no process, then continues.

    Exactly one of ``duration`` (seconds from the moment the wait is committed) and
    ``until`` (``until(ctx)`` returning seconds or an aware ``datetime``) is set.
    """

    duration: float | None = None
    until: NodeCallback | None = None
    kind: NodeKind = dataclasses.field(default=NodeKind.SLEEP, init=False)

    @property
    def timeout(self) -> float | None:
        """A sleep has no node deadline (its wake time is the wait)."""
        return None


@dataclass(frozen=True, kw_only=True)
class WaitEventNode:
    """Waits with no runner for an event named ``name`` sent to the run (``run signal``).

    The event's data is the output. ``timeout`` (seconds, from the first time the node
    waits) gives the ``timed_out`` outcome; ``validate(data, ctx)`` may raise ``Rejected``
    to refuse an event, which is then never consumed.
    """

    name: str
    timeout: float | None = None
    validate: Validator | None = None
    kind: NodeKind = dataclasses.field(default=NodeKind.WAIT_EVENT, init=False)


Node: TypeAlias = (
    ComputeNode
    | ActionNode
    | ShellNode
    | NotifyNode
    | AgentNode
    | CheckpointNode
    | HumanDecisionNode
    | SleepNode
    | WaitEventNode
    | SubworkflowNode
    | FanOutNode
)
"""Any node of a workflow graph."""

NODE_TYPES = (
    ComputeNode,
    ActionNode,
    ShellNode,
    NotifyNode,
    AgentNode,
    CheckpointNode,
    HumanDecisionNode,
    SleepNode,
    WaitEventNode,
    SubworkflowNode,
    FanOutNode,
)

RETRYING_TYPES = (ComputeNode, ActionNode, ShellNode)
"""The node kinds that may declare a retry policy."""


_N = TypeVar("_N")


def _built(node: _N, problem: str | None = None) -> _N:
    """``node`` with the author's call line, and ``problem`` kept for the Workflow check."""
    remember(node)
    return node if problem is None else defer(node, problem)


def _no_retry(kind: str, retry: object, why: str) -> str | None:
    """The problem of a ``retry`` given to a node kind that never retries, or None."""
    return None if retry is None else f"{kind} nodes cannot declare retry: {why}"


def compute(
    run: NodeCallback, *, timeout: float | None = None, retry: RetryPolicy | None = None
) -> ComputeNode:
    """Pure data shaping: ``run(ctx)`` returns the node's JSON output.

    ``retry=retry(...)`` tries a failed or timed-out attempt again (``retries.retry``).
    """
    return _built(ComputeNode(run=run, timeout=timeout, retry=retry))


def settings_route(run: NodeCallback, *, timeout: float | None = None) -> ComputeNode:
    """A routing node over the run's settings: ``run(ctx)`` returns the output a ``switch``
    routes on (``{"route": ...}``), reading ``ctx.settings``.

    It is a ``compute`` node with one more rule: when the run's settings change after its
    attempt started and before its route commits, ``run`` is evaluated again with the new
    settings (``ctx.settings_change`` says which), so the route taken always follows the
    settings as they were when it committed. Needs ``Workflow(settings=...)``.
    """
    return _built(ComputeNode(run=run, timeout=timeout, settings_route=True))


def action(
    run: ActionCallback,
    *,
    effect: Effect | None = None,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
) -> ActionNode:
    """A side effect: ``run(ctx)`` changes the world and returns a JSON output.

    ``effect`` is required (``idempotent_effect(type)`` or ``manual_effect(type)``); the
    ``Workflow`` refuses an action without one. ``retry=retry(...)`` tries a failed attempt
    again under the same effect key (only with ``idempotent_effect``).
    """
    return _built(ActionNode(run=run, effect=effect, timeout=timeout, retry=retry))


def shell(
    command: Sequence[str] | ActionCallback,
    *,
    effect: Effect | None = None,
    allow_exit_codes: Iterable[int] = (0,),
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    env: Mapping[str, str | None] | ActionCallback | None = None,
) -> ShellNode:
    """Run a command (an argument list, or ``command(ctx)`` returning one) as an action.

    The output is ``{"exitCode", "stdout", "stderr"}``; an exit code not in
    ``allow_exit_codes`` fails the node. ``effect`` is required, as for ``action``;
    ``retry`` as for ``action``. The command runs with the run's environment
    (docs/authoring.md, "Environment"); ``env`` (a mapping, or ``env(ctx)`` returning one)
    adds variables to it for this command, and a ``None`` value removes one.
    """
    if isinstance(allow_exit_codes, str | bytes) or not isinstance(allow_exit_codes, Iterable):
        raise TypeError(f"allow_exit_codes must be a list of integers, got {allow_exit_codes!r}")
    codes = frozenset(allow_exit_codes)
    if isinstance(command, list):
        command = tuple(command)  # a frozen node holds no list the caller could still change
    added = env if env is None or callable(env) else _env_pairs(env)
    return _built(
        ShellNode(
            command=command,
            effect=effect,
            allow_exit_codes=codes,
            timeout=timeout,
            retry=retry,
            env=added,
        )
    )


ENV_NAME_PATTERN = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
"""What a variable name in ``shell(env=...)`` may be."""


def env_problem(env: object) -> str | None:
    """Why ``env`` cannot be a shell command's added variables (a mapping of names to
    strings, or to None to remove one), or None. The runner applies the same check to what
    an ``env(ctx)`` callback returns."""
    if not isinstance(env, Mapping):
        return f"env must be a mapping of variable names to strings, got {type(env).__name__}"
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME_PATTERN.match(name):
            return f"env has {name!r}, which is not a variable name (letters, digits and _)"
        if value is not None and (not isinstance(value, str) or "\0" in value):
            return f"env[{name!r}] must be a string without NUL (or None to remove it)"
    return None


def _env_pairs(env: object) -> tuple[tuple[str, str | None], ...]:
    problem = env_problem(env)
    if problem is not None:
        raise TypeError(problem)
    assert isinstance(env, Mapping)
    return tuple(sorted(env.items()))  # a frozen node holds nothing the caller could change


def notify(
    message: TextSpec,
    *,
    kind: str = "progress",
    audience: str | None = None,
    retry: None = None,
) -> NotifyNode:
    """Send ``message`` (text or ``message(ctx)``) to the session that started the run.

    ``kind`` is ``"progress"`` (along the way) or ``"final"`` (the run's closing message).
    ``audience`` names an audience of the user's channel configuration (``pi-workflows
    audience set``, docs/channels.md): the message also goes to its channels.
    """
    try:
        notify_kind = NotifyKind(kind)
    except ValueError:
        raise ValueError(f"notify kind must be 'progress' or 'final', got {kind!r}") from None
    return _built(
        NotifyNode(message=message, notify_kind=notify_kind, audience=audience),
        _no_retry("notify", retry, "a message is recorded once, with nothing to try again"),
    )


def assistant_message() -> AssistantMessage:
    """Expected output of an agent step whose output is the model's visible reply text."""
    return AssistantMessage()


def agent(
    prompt: TextSpec,
    expected_output: str | AssistantMessage | None = None,
    validate: Validator | None = None,
    timeout: float | None = AGENT_DEFAULT_TIMEOUT,
    allowed_tools: Sequence[str] | None = None,
    *,
    retry: None = None,
    output: object = None,
) -> AgentNode:
    """An interactive model step.

    ``prompt`` (text or ``prompt(ctx)``) is sent with the step contract appended; the model
    submits a JSON output described by ``expected_output`` through the ``workflow`` tool.
    ``output`` (a Pydantic model class or a JSON Schema dict) is the output's typed
    contract: a submission that does not match it is rejected with the path of the first
    wrong field, and ``expected_output`` (generated from the schema when not given) ends
    with the schema. ``validate(output, ctx)`` may raise ``Rejected(message)`` to send the
    model back with the message. ``timeout`` defaults to 15 minutes; ``None`` disables it.
    ``allowed_tools`` limits the tools the model may use during the step.
    """
    tools = tuple(allowed_tools) if allowed_tools is not None else None
    typed = contract(output, "output")
    return _built(
        AgentNode(
            prompt=prompt,
            expected_output=_expected(expected_output, typed),
            validate=validate,
            timeout=timeout,
            allowed_tools=tools,
            output=typed,
        ),
        _no_retry("agent", retry, "a step is asked again through validate (raise Rejected)"),
    )


def _expected(given: str | AssistantMessage | None, typed: Contract | None) -> Any:
    """An agent's expected output: as given, ending with the schema of a valid ``output``
    contract, or that contract's generated text when none is given. Anything else is left
    as it is for the ``Workflow`` to report (``""`` when nothing was given)."""
    if typed is None or typed.problem is not None or isinstance(given, AssistantMessage):
        return "" if given is None else given
    if given is None:
        return typed.text
    if isinstance(given, str) and given.strip():
        return f"{given.rstrip()}\n{typed.note}"
    return given


def decision(
    prompt: TextSpec,
    routes: Mapping[str, str] | Sequence[str],
    *,
    field: str = "route",
    validate: Validator | None = None,
    timeout: float | None = AGENT_DEFAULT_TIMEOUT,
    allowed_tools: Sequence[str] | None = None,
) -> AgentNode:
    """An agent step that must pick one of ``routes``; compiles to an ``agent`` node.

    ``routes`` maps each route id to what it means (or lists the ids). The expected output
    is a JSON object whose ``field`` (default ``"route"``) is one of the ids, plus a short
    ``"reason"``; any other submission is rejected with a message the model can act on.
    Route the node with ``switch(node, on="$.route", cases={...})`` covering every route.
    """
    meanings: dict[str, str | None]
    if isinstance(routes, Mapping):
        meanings = {str(key): str(value) for key, value in routes.items()}
    elif isinstance(routes, Sequence) and not isinstance(routes, str):
        meanings = {str(key): None for key in routes}
    else:
        raise TypeError(f"decision routes must be a mapping or a list of ids, got {routes!r}")
    route_ids = tuple(meanings)
    allowed = ", ".join(json.dumps(r) for r in route_ids)

    def check_route(output: Any, ctx: NodeContext) -> object:
        chosen = output.get(field) if isinstance(output, dict) else None
        if not isinstance(chosen, str) or chosen not in route_ids:
            got = json.dumps(chosen) if isinstance(output, dict) else "not a JSON object"
            raise Rejected(
                f"the output must be a JSON object whose {json.dumps(field)} is one of "
                f"{allowed}; got {got}"
            )
        return validate(output, ctx) if validate is not None else None

    lines = [
        f'A JSON object whose {json.dumps(field)} is one of {allowed}, with a short "reason".',
        "Routes:",
    ]
    for route_id, meaning in meanings.items():
        lines.append(
            f"- {json.dumps(route_id)}: {meaning}" if meaning else f"- {json.dumps(route_id)}"
        )
    example = {field: route_ids[0] if route_ids else "...", "reason": "..."}
    lines.append(f"Example: {json.dumps(example)}")
    return _built(
        AgentNode(
            prompt=prompt,
            expected_output="\n".join(lines),
            validate=check_route,
            timeout=timeout,
            allowed_tools=tuple(allowed_tools) if allowed_tools is not None else None,
            route_field=field,
            routes=route_ids,
        )
    )


def checkpoint(
    request: JsonValue | NodeCallback,
    *,
    validate: Validator | None = None,
    timeout: float | None = None,
    retry: None = None,
    answer: object = None,
    for_person: bool = False,
) -> CheckpointNode:
    """Wait for an ordinary answer to ``request`` from a person or the model.

    The output is the submitted answer (a JSON value). ``answer`` (a Pydantic model class
    or a JSON Schema dict) is its typed contract: an answer that does not match it is
    refused with the path of the first wrong field, and the request shows the expected
    answer and the schema. ``validate(answer, ctx)`` may raise ``Rejected`` to ask again.
    ``timeout`` (default none) times the node out. ``for_person=True`` asks a person only:
    the model is never shown it and its tool cannot answer it (Pi asks the person in a text
    dialog; the CLI's ``checkpoint answer`` answers it too).
    """
    return _built(
        CheckpointNode(
            request=request,
            validate=validate,
            timeout=timeout,
            answer=contract(answer, "answer"),
            for_person=for_person,
        ),
        _no_retry("checkpoint", retry, "an answer is asked again through validate instead"),
    )


def choice(id: str, label: str | None = None, description: str | None = None) -> Choice:
    """A choice of a ``human_decision``: ``id`` is what switches match, ``label`` is shown."""
    return Choice(id, label if label is not None else id, description)


def human_decision(
    title: TextSpec,
    choices: Sequence[Choice],
    on_timeout: tuple[float, str] | None = None,
    *,
    details: TextSpec | None = None,
    audience: str | None = None,
    retry: None = None,
) -> HumanDecisionNode:
    """A decision only a person may take, among ``choices``.

    ``on_timeout=(duration, choice_id)`` picks ``choice_id`` by itself after ``duration``
    seconds (use ``minutes(...)``); without it the decision waits until answered or the run
    is cancelled. The output is ``{"choice": id, "decidedBy": "person" | "timeout"}``; route
    it with a ``switch`` on ``$.choice`` that covers every choice. ``audience`` names who is
    asked (an audience of ``pi-workflows audience set``, docs/channels.md); without it the
    run's origin session and the web page are. Whoever answers first wins, on any seat.
    """
    timeout_rule: OnTimeout | None = None
    if on_timeout is not None:
        if not isinstance(on_timeout, tuple) or len(on_timeout) != 2:
            raise TypeError(f"on_timeout must be a (duration, choice_id) pair, got {on_timeout!r}")
        timeout_rule = OnTimeout(after=on_timeout[0], choice=on_timeout[1])
    return _built(
        HumanDecisionNode(
            title=title,
            choices=tuple(choices),
            on_timeout=timeout_rule,
            details=details,
            audience=audience,
        ),
        _no_retry("human_decision", retry, "a person's decision is taken once"),
    )


def sleep(duration: float | None = None, *, until: NodeCallback | None = None) -> SleepNode:
    """Wait with no runner and no claim, then continue.

    ``duration`` is seconds (use ``seconds(...)``/``minutes(...)``) from the moment the wait
    is committed; ``until(ctx)`` returns seconds from now or an aware ``datetime``. The
    output is ``{"until": ISO-8601 time, "lateMs": how late it woke}``. A server that was
    down when the time came continues the run at its next start.
    """
    # A duration that is no number, or both or neither of duration and until, is kept as
    # given: the Workflow check reports it with the file's other problems.
    if isinstance(duration, int | float) and not isinstance(duration, bool):
        duration = float(duration)
    return _built(SleepNode(duration=duration, until=until))


def wait_event(
    name: str, timeout: float | None = None, validate: Validator | None = None
) -> WaitEventNode:
    """Wait with no runner for the event ``name`` (``pi-workflows run signal RUN NAME``).

    Events sent before the run gets here are kept, and the first matching wait consumes
    the oldest one, exactly once. The event's ``data`` is the output. ``timeout`` seconds
    after the node first waits, it ends ``timed_out`` (route it with ``$result.outcome``);
    ``validate(data, ctx)`` may raise ``Rejected`` to refuse an event (its sender hears the
    message; the event is not consumed).
    """
    return _built(WaitEventNode(name=name, timeout=timeout, validate=validate))
