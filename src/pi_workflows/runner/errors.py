"""Errors of the runner and resolver children, and how an error becomes one safe line.

Runs in the runner or resolver child; never opens the database. Each error maps to one way
the child ends (see ``main.exit_code_for``): ``ClaimLostError`` is a clean exit (0) because
the server has already moved on; ``RunnerTerminated`` is the SIGTERM path (143); every
other ``RunnerError`` is "the child could not continue" (70) and the server decides from the
state it has committed.
"""

from __future__ import annotations

from pi_workflows.protocol import safe_message


class RunnerError(Exception):
    """Base class: the runner child cannot continue this generation.

    ``str(error)`` is one line, safe to write to stderr (the server keeps a tail of it).
    """


class ChannelClosedError(RunnerError):
    """The server closed the channel (or sent a broken frame) while the child needed it.

    Distinct from ``ClaimLostError``: nobody told the child to stop, the conversation just
    ended, so the child exits with the failure code and the server (if it is still alive)
    decides from committed state.
    """


class ProtocolViolationError(RunnerError):
    """The server sent something the runner protocol does not allow at this point.

    For example a reply to another message id, a second ``launch``, a launch envelope that
    does not decode, or a reply payload missing a required field. ``what`` names the
    message kind involved.
    """

    def __init__(self, what: str, problem: str) -> None:
        self.what = what
        self.problem = problem
        super().__init__(safe_message(f"runner protocol violation ({what}): {problem}"))


class UnexpectedReplyError(RunnerError):
    """A proposal or read was answered with an outcome other than accepted/adopted/claimLost.

    ``kind`` is the message kind, ``outcome`` the reply's outcome (``rejected``,
    ``conflict``, ``notFound``, ``unavailable``) and ``code``/``message`` the reply's error
    if it carried one. The child writes ``str(error)`` to stderr and exits with code 70.
    """

    def __init__(self, kind: str, outcome: str, code: str | None, message: str | None) -> None:
        self.kind = kind
        self.outcome = outcome
        self.code = code
        self.message = message
        detail = f": {code}: {message}" if code else ""
        super().__init__(safe_message(f"{kind} was answered {outcome}{detail}"))


class ClaimLostError(RunnerError):
    """The server answered ``claimLost``: this child's generation or epoch is stale.

    The child exits at once with code 0 and sends nothing else. ``kind`` is the message kind
    whose reply said so.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        super().__init__(f"claim lost (reply to {kind})")


class StopCommandError(RunnerError):
    """The server sent a ``cancel`` or ``stop`` command instead of a reply or start command.

    The protocol delivers cancellation as SIGTERM, but the command enum has these two
    values; a child that receives one stops like after ``claimLost`` (exit 0, nothing sent).
    """

    def __init__(self, command: str) -> None:
        self.command = command
        super().__init__(f"the server sent {command!r}")


class EffectOutcomeUnknownError(RunnerError):
    """An action body outlived its node deadline and the grace after it.

    Its effect may or may not have happened, so the runner settles nothing: it exits and
    leaves the ``applying`` effect to the server (an idempotent effect becomes pending, a
    manual one ambiguous). ``node`` names the node.
    """

    def __init__(self, node: str, effect_id: str) -> None:
        self.node = node
        self.effect_id = effect_id
        super().__init__(
            f"the action of node {node!r} is still running after its deadline; effect "
            f"{effect_id} is left applying for the server to settle"
        )


class RunnerTerminated(BaseException):  # a signal, like KeyboardInterrupt
    """Raised in the main thread by the SIGTERM handler to unwind whatever it was doing.

    A ``BaseException`` so that workflow code and libraries catching ``Exception`` cannot
    swallow it. The child then stops its shell process groups and exits with 143, sending
    nothing (the server committed the cause before it signalled).
    """


def describe_exception(exc: BaseException) -> str:
    """One safe line for a callback's exception: ``TypeName: message`` (or just the type)."""
    name = type(exc).__name__
    text = str(exc)
    return safe_message(f"{name}: {text}" if text else name)


def one_line(text: str) -> str:
    """``text`` as one bounded printable line (the protocol's ``safe_message``)."""
    return safe_message(text)
