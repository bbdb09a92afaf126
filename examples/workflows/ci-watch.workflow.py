"""ci-watch: poll CI every 5 minutes, give up after an hour.

`check` runs the status command from the input (`{"command": [...]}`, which prints one of
`passed`, `failed` or `pending`; default: `git log -1 --format=pending`, so the example runs
anywhere; `"giveUpMinutes"` changes the hour). A flaky command is tried up to three times
with backoff (`retry`); each try uses the same effect key. `judge` reads the status and
the hour's deadline that `begin` set; while CI is pending, `pause` sleeps five minutes with
no runner, no claim and no process (a server restart neither resets nor skips it), then
`check` runs again. The run ends with a final message in every case: passed, failed, or
no verdict within the hour.

    pi-workflows run start ci-watch --input '{"command": ["./ci-status.sh"]}'
"""

from datetime import UTC, datetime, timedelta

from pi_workflows import (
    NodeContext,
    Workflow,
    compute,
    edge,
    idempotent_effect,
    minutes,
    notify,
    retry,
    seconds,
    shell,
    sleep,
    switch,
)

POLL = minutes(5)
GIVE_UP_AFTER = timedelta(hours=1)


def begin(ctx: NodeContext) -> dict[str, object]:
    data = ctx.input if isinstance(ctx.input, dict) else {}
    minutes_given = data.get("giveUpMinutes")
    after = GIVE_UP_AFTER
    if isinstance(minutes_given, int | float) and not isinstance(minutes_given, bool):
        after = timedelta(minutes=max(0.0, float(minutes_given)))
    return {"deadline": (datetime.now(UTC) + after).isoformat()}


def status_command(ctx: NodeContext) -> list[str]:
    data = ctx.input if isinstance(ctx.input, dict) else {}
    command = data.get("command")
    if isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        return command
    return ["git", "log", "-1", "--format=pending"]


def judge(ctx: NodeContext) -> dict[str, object]:
    output = ctx.outputs["check"]
    status = str(output["stdout"]).strip().lower() if isinstance(output, dict) else ""
    deadline = datetime.fromisoformat(str(ctx.outputs["begin"]["deadline"]))
    if status in ("passed", "failed"):
        state = status
    elif datetime.now(UTC) >= deadline:
        state = "expired"
    else:
        state = "pending"
    return {"state": state, "polls": ctx.visit}


workflow = Workflow(
    "ci-watch",
    start="begin",
    max_steps=60,  # twelve polls of three nodes each fit well within an hour's loop
    nodes={
        "begin": compute(begin),
        "check": shell(
            status_command,
            effect=idempotent_effect("ci-status"),  # reading a status is safe to repeat
            timeout=minutes(1),
            retry=retry(attempts=3, delay=seconds(10), backoff=2.0, max_delay=minutes(1)),
        ),
        "judge": compute(judge),
        "pause": sleep(POLL),
        "passed": notify(lambda ctx: "CI passed.", kind="final"),
        "failed": notify(lambda ctx: "CI failed.", kind="final"),
        "expired": notify(lambda ctx: "CI gave no verdict within an hour.", kind="final"),
        "broken": notify(
            lambda ctx: f"The CI status command kept failing: {ctx.results['check']['error']}",
            kind="final",
        ),
    },
    edges=[
        edge("begin", "check"),
        switch(
            "check",
            on="$result.outcome",
            cases={"ok": "judge", "failed": "broken", "timed_out": "broken"},
        ),
        switch(
            "judge",
            on="$.state",
            cases={
                "passed": "passed",
                "failed": "failed",
                "expired": "expired",
                "pending": "pause",
            },
        ),
        edge("pause", "check"),
    ],
)
