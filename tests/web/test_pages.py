"""The web page in a real headless Chromium against a real server: the run list and its
pages, a run page that follows the run live, answering and deciding, a wrong answer, an
answer another seat gave first, and the actions on a run.

Screenshots of each page are saved (docs/images/ui-*.png are made by these tests with
`PI_WORKFLOWS_UI_SCREENSHOTS=docs/images`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from support.browser import PageUrl, chromium, chromium_contexts, screenshot_dir
from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def _shot(tab: Any, tmp_path: Path, name: str) -> None:
    tab.screenshot(path=str(screenshot_dir(tmp_path) / f"ui-{name}.png"), full_page=True)


def _waiting(server: ServerProcess, node: str = "question") -> str:
    run_id = server.start_run("ask")
    view = server.wait_status(run_id, "waiting")
    assert view["waitingOn"]["nodeId"] == node
    return run_id


def _live(tab: Any) -> None:
    """Wait until the page's event stream is open (the header says Live)."""
    expect(tab.locator("#live-state")).to_have_text("Live")


def test_the_list_shows_runs_counts_and_pages_through_them(
    server: ServerProcess, page_url: PageUrl, browser: Any, tmp_path: Path
) -> None:
    """60 runs: the first page lists the newest 50, the next page the other 10; the counts
    and the runs that need a person come first; a new run appears without a reload."""
    with server.client() as client:
        started = [
            client.start_run("quick", {"n": n}, project_dir=server.project)["runId"]
            for n in range(60)
        ]
    for run_id in started:
        server.wait_status(run_id, "completed")
    asking = _waiting(server)
    tab = browser
    tab.goto(page_url.base + "/")
    _live(tab)
    needs = tab.locator("section.needs tbody tr")
    expect(needs).to_have_count(1)
    expect(needs.first).to_contain_text(asking)
    expect(tab.locator(".counts")).to_contain_text("completed 60")
    expect(tab.locator(".counts")).to_contain_text("waiting 1")
    first_page = tab.locator("section[aria-labelledby=list-title] tbody tr")
    expect(first_page).to_have_count(50)
    _shot(tab, tmp_path, "runs")
    shown = set(first_page.locator("code").all_inner_texts())
    tab.get_by_role("link", name="Next page (older runs)").click()
    second_page = tab.locator("section[aria-labelledby=list-title] tbody tr")
    expect(second_page).to_have_count(11)
    rest = set(second_page.locator("td:first-child code").all_inner_texts())
    assert shown.isdisjoint(rest)
    assert set(started) | {asking} == {r for r in shown | rest if r.startswith("run_")}
    tab.get_by_role("link", name="First page").click()
    expect(tab.locator("section[aria-labelledby=list-title] tbody tr")).to_have_count(50)
    _live(tab)
    newest = server.start_run("ask")
    expect(tab.locator("section[aria-labelledby=list-title] tbody tr").first).to_contain_text(
        newest
    )
    server.wait_status(newest, "waiting")
    tab.select_option("select[name=status]", "waiting")
    tab.get_by_role("button", name="Filter").click()
    expect(tab.locator("section[aria-labelledby=list-title] tbody tr")).to_have_count(2)


def test_a_run_page_follows_the_run_as_it_moves(
    server: ServerProcess, page_url: PageUrl, browser: Any, tmp_path: Path
) -> None:
    """The graph, the status and the next step change on the page, with no reload, while
    the run goes from running to failed; the node page shows its log and traceback."""
    gate = tmp_path / "gate"
    run_id = server.start_run("gate", {"gate": str(gate), "fail": True})
    tab = browser
    tab.goto(f"{page_url.base}/runs/{run_id}")
    _live(tab)
    wait_node = tab.locator("svg.graph a[data-node=wait]")
    expect(wait_node).to_have_attribute("data-state", "running")
    expect(tab.locator("#run-status")).to_have_text("running")
    loads = tab.evaluate("performance.getEntriesByType('navigation').length")
    gate.write_text("open")
    expect(wait_node).to_have_attribute("data-state", "completed")
    expect(tab.locator("svg.graph a[data-node=finish]")).to_have_attribute("data-state", "failed")
    expect(tab.locator("#run-status")).to_have_text("failed")
    expect(tab.locator("#next-step")).to_have_text(
        f"to run it again from the start: pi-workflows run restart {run_id}"
    )
    assert server.run(run_id)["nextStep"] == tab.locator("#next-step").inner_text()
    assert tab.evaluate("performance.getEntriesByType('navigation').length") == loads
    assert tab.url.endswith(f"/runs/{run_id}"), "no reload, no navigation"
    _shot(tab, tmp_path, "run-failed")
    tab.locator("svg.graph a[data-node=finish]").click()
    expect(tab.locator("h1")).to_contain_text("finish")
    expect(tab.locator("pre.log").first).to_contain_text("about to fail")
    expect(tab.locator("pre.log.error")).to_contain_text("ValueError: told to fail")
    _shot(tab, tmp_path, "node")


def test_a_run_page_shows_its_settings_and_follows_their_changes(
    server: ServerProcess, page_url: PageUrl, browser: Any
) -> None:
    """The run page shows the run's live settings and their change number, and a change
    made at the CLI appears there without a reload; each attempt names the change it ran
    with."""
    run_id = _waiting(server)
    tab = browser
    tab.goto(f"{page_url.base}/runs/{run_id}")
    _live(tab)
    panel = tab.locator("#settings pre")
    expect(panel).to_contain_text('"reviewers": 2')
    patch = [{"op": "replace", "path": "/reviewers", "value": 3}]
    changed = server.cli("run", "settings", run_id, "--patch", json.dumps(patch))
    assert changed.returncode == 0, changed.stderr
    expect(panel).to_contain_text('"reviewers": 3')
    expect(tab.locator("dl.facts").last).to_contain_text("change 1, last by person")
    expect(tab.locator("table").first).to_contain_text("(settings 0)")


def test_settings_are_changed_from_the_page_and_a_bad_patch_changes_nothing(
    server: ServerProcess, page_url: PageUrl, browser: Any
) -> None:
    """The page's form sends a JSON Patch as the person: text that is not a patch and a
    result the schema refuses show one line and store nothing; a change made elsewhere
    after the page was drawn is refused by its change number; a good patch is change 1."""
    run_id = _waiting(server)
    tab = browser
    tab.goto(f"{page_url.base}/runs/{run_id}")
    _live(tab)

    def send(text: str) -> None:
        tab.locator("summary", has_text="Change settings…").click()
        tab.get_by_label("JSON Patch (RFC 6902)").fill(text)
        tab.get_by_role("button", name="Change the settings").click()

    def change() -> int:
        with server.client() as client:
            return int(client.settings(run_id)["change"])

    send('{"op": "replace"}')
    expect(tab.locator("#problem")).to_contain_text("JSON array of operations")
    send('[{"op": "replace", "path": "/reviewers", "value": "many"}]')
    expect(tab.locator("#problem")).to_be_visible()
    assert change() == 0
    send('[{"op": "replace", "path": "/reviewers", "value": 5}]')
    expect(tab.locator("#notice")).to_contain_text("The settings were changed")
    expect(tab.locator("#settings pre")).to_contain_text('"reviewers": 5')
    assert change() == 1
    # A person starts a patch; a change made elsewhere redraws the section under them: what
    # they typed stays, and sending it is refused with the current change number.
    tab.locator("summary", has_text="Change settings…").click()
    typed = '[{"op": "replace", "path": "/reviewers", "value": 7}]'
    tab.get_by_label("JSON Patch (RFC 6902)").fill(typed)
    patch = [{"op": "replace", "path": "/reviewers", "value": 6}]
    assert server.cli("run", "settings", run_id, "--patch", json.dumps(patch)).returncode == 0
    expect(tab.locator("#settings pre")).to_contain_text('"reviewers": 6')
    expect(tab.get_by_label("JSON Patch (RFC 6902)")).to_have_value(typed)
    tab.get_by_role("button", name="Change the settings").click()
    expect(tab.locator("#problem")).to_contain_text("2")
    assert change() == 2
    with server.client() as client:
        assert client.settings(run_id)["settings"] == {"reviewers": 6}


def test_follow_ups_are_queued_removed_and_listed_from_the_page(
    server: ServerProcess, page_url: PageUrl, browser: Any
) -> None:
    """A run with an origin session: the page queues follow-ups as the person (an empty one
    is refused, nothing stored), lists them in order as the server has them, removes a
    queued one, and shows the ones a cancel left cancelled, with the reason."""
    run_id = server.start_run("ask", origin_session="session-page")
    server.wait_status(run_id, "waiting")
    tab = browser
    tab.goto(f"{page_url.base}/runs/{run_id}")
    _live(tab)
    section = tab.locator("#follow-ups")
    expect(section).to_contain_text("None queued")

    def queue(text: str) -> None:
        section.locator("summary", has_text="Queue a follow-up…").click()
        tab.get_by_label("Follow-up prompt").fill(text)
        tab.get_by_role("button", name="Queue the follow-up").click()

    def listed() -> list[tuple[str, str]]:
        with server.client() as client:
            found = client.follow_ups(run_id)["followUps"]
        return [(f["text"], f["status"]) for f in found]

    queue("   ")
    expect(tab.locator("#problem")).to_contain_text("a follow-up needs a prompt")
    assert listed() == []
    queue("first, run the tests")
    expect(tab.locator("#notice")).to_contain_text("The follow-up was queued")
    queue("then write the changelog")
    expect(section.locator("li")).to_have_count(2)
    expect(section.locator("li").nth(0)).to_contain_text("first, run the tests")
    tab.get_by_role("button", name="Remove follow-up 1").click()
    expect(tab.locator("#notice")).to_contain_text("The follow-up was removed")
    assert listed() == [("first, run the tests", "removed"), ("then write the changelog", "queued")]
    # A cancel made elsewhere cancels the queued one; the page shows it live, with the reason.
    assert server.cli("run", "cancel", run_id).returncode == 0
    expect(section.locator("li").nth(1)).to_contain_text("cancelled")
    expect(section.locator("li").nth(1)).to_contain_text("only after a run completes")
    expect(section.locator("summary", has_text="Queue a follow-up…")).to_have_count(0)


def test_answering_a_checkpoint_and_deciding_a_decision_from_the_page(
    server: ServerProcess, page_url: PageUrl, browser: Any, tmp_path: Path
) -> None:
    """The form built from the answer schema sends the typed answer; the decision has one
    button per choice; the run completes with both, answered by the page's client."""
    run_id = _waiting(server)
    tab = browser
    tab.goto(f"{page_url.base}/runs/{run_id}")
    _live(tab)
    form = tab.get_by_role("form", name="Answer the checkpoint")
    expect(form).to_contain_text("How many reviewers?")
    _shot(tab, tmp_path, "run-checkpoint")
    form.get_by_label("count").fill("3")
    form.get_by_label("note").fill("two humans, one model")
    form.get_by_role("button", name="Send the answer").click()
    expect(tab.locator("#notice")).to_have_text("Your answer was accepted.")
    decision = tab.get_by_role("form", name="Decide")
    expect(decision).to_contain_text("Ship it?")
    expect(decision.get_by_role("button")).to_have_count(2)
    _shot(tab, tmp_path, "run-decision")
    decision.get_by_role("button", name="Ship").click()
    expect(tab.locator("#notice")).to_have_text("Your decision was recorded.")
    expect(tab.locator("#run-status")).to_have_text("completed")
    view = server.wait_status(run_id, "completed")
    assert view["output"] == {"count": 3, "choice": "yes"}
    with server.client() as client:
        history = client.history(run_id)
    actors = {e["type"]: e["actor"] for e in history if e["type"].startswith("interaction.")}
    assert actors == {
        "interaction.submitted": "client:web:ui",
        "interaction.answered": "client:web:ui",
    }
    expect(tab.locator("#last-answer")).to_contain_text("client:web:ui")
    _shot(tab, tmp_path, "run-completed")


def _pending(server: ServerProcess, run_id: str) -> list[tuple[Any, ...]]:
    return server.query(
        "SELECT status FROM interactive_requests WHERE run_id = ? ORDER BY created_at", run_id
    )


def test_a_wrong_answer_shows_the_workflows_message_and_stores_nothing(
    server: ServerProcess, page_url: PageUrl, browser: Any, tmp_path: Path
) -> None:
    """A value the schema refuses, the workflow's own `Rejected`, and text that is not a
    number: each is shown above the form with what was typed; the request stays open, no
    answer is stored, and the run still waits."""
    run_id = _waiting(server)
    tab = browser
    tab.goto(f"{page_url.base}/runs/{run_id}")
    form = tab.get_by_role("form", name="Answer the checkpoint")
    form.get_by_label("count").fill("0")
    form.get_by_role("button", name="Send the answer").click()
    error = tab.locator("#answer-error")
    expect(error).to_contain_text("answer.count: 0 is less than the minimum of 1")
    form = tab.get_by_role("form", name="Answer the checkpoint")
    expect(form.get_by_label("count")).to_have_value("0")
    form.get_by_label("count").fill("2")
    form.get_by_label("note").fill("nope")
    form.get_by_role("button", name="Send the answer").click()
    expect(tab.locator("#answer-error")).to_have_text(
        "a note of 'nope' is not an answer: say what you mean"
    )
    _shot(tab, tmp_path, "run-rejected")
    form = tab.get_by_role("form", name="Answer the checkpoint")
    form.get_by_label("count").fill("two")
    form.get_by_role("button", name="Send the answer").click()
    expect(tab.locator("#answer-error")).to_contain_text("count must be a whole number")
    view = server.run(run_id)
    assert view["status"] == "waiting"
    assert view["waitingOn"]["status"] == "pending"
    assert _pending(server, run_id) == [("pending",)]
    submissions = server.query(
        "SELECT s.status FROM interactive_submissions s JOIN interactive_requests r"
        " USING (request_id) WHERE r.run_id = ?",
        run_id,
    )
    assert sorted(submissions) == [("rejected",), ("rejected",)], "the form's refusal sent nothing"


def test_another_seat_answers_first_and_the_page_shows_the_winner(
    server: ServerProcess, page_url: PageUrl, tmp_path: Path
) -> None:
    """The CLI decides while the page shows the decision: a live page shows who answered
    what; a page that was not updated (no script) and sends its choice after that is told
    the winner, and its choice is not recorded."""
    run_id = _waiting(server)
    with server.client() as client:
        request_id = client.get_run(run_id)["waitingOn"]["requestId"]
        client.answer_checkpoint(run_id, {"count": 1}, request_id)
    server.wait_status(run_id, "waiting")
    with chromium_contexts(tmp_path, {}, {"javascript": False}) as (live, still):
        tab, stale = live.new_page(), still.new_page()
        for each in (tab, stale):
            each.goto(page_url.url)
            each.goto(f"{page_url.base}/runs/{run_id}")
            expect(each.get_by_role("form", name="Decide")).to_be_visible()
        _live(tab)
        done = server.cli("decision", "answer", run_id, "--choice", "no")
        assert done.returncode == 0, done.stderr
        expect(tab.get_by_role("form", name="Decide")).to_have_count(0)
        expect(tab.locator("#last-answer")).to_contain_text(
            "decision decide was answered by client:cli: no"
        )
        stale.get_by_role("form", name="Decide").get_by_role("button", name="Ship").click()
        expect(stale.locator("#problem")).to_contain_text(
            "Another seat answered first: decision decide was answered by client:cli: no"
        )
        _shot(stale, tmp_path, "run-answered-elsewhere")
    view = server.wait_status(run_id, "completed")
    assert view["output"]["choice"] == "no"


def test_pause_resume_cancel_and_fork_from_the_page(
    server: ServerProcess, page_url: PageUrl, browser: Any, tmp_path: Path
) -> None:
    """Each button sends its command: pause (reached with the keyboard), resume, cancel with
    a reason, and a fork from a node of a completed run opens the new run's page."""
    run_id = _waiting(server)
    tab = browser
    tab.goto(f"{page_url.base}/runs/{run_id}")
    _live(tab)
    for _ in range(40):  # the keyboard reaches the Pause button and Enter presses it
        tab.keyboard.press("Tab")
        if tab.evaluate("document.activeElement.textContent.trim()") == "Pause":
            break
    else:
        pytest.fail("Tab never reached the Pause button")
    tab.keyboard.press("Enter")
    expect(tab.locator("#notice")).to_have_text("Paused.")
    assert server.run(run_id)["status"] == "paused"
    expect(tab.locator("#run-status")).to_have_text("paused")
    tab.get_by_role("button", name="Resume").click()
    expect(tab.locator("#notice")).to_have_text("Resumed.")
    assert server.run(run_id)["status"] == "waiting"
    tab.locator("summary", has_text="Cancel…").click()
    tab.get_by_label("Reason").fill("wrong branch")
    tab.get_by_role("button", name="Cancel the run").click()
    expect(tab.locator("#notice")).to_have_text("Cancelled.")
    cancelled = server.run(run_id)
    assert cancelled["status"] == "cancelled"
    assert "wrong branch" in json.dumps(cancelled)
    source = server.start_run("quick", {"n": 7})
    server.wait_status(source, "completed")
    tab.goto(f"{page_url.base}/runs/{source}")
    tab.locator("summary", has_text="Fork…").click()
    tab.get_by_label("From node").select_option("one")
    tab.get_by_role("button", name="Fork a new run").click()
    expect(tab.locator("#notice")).to_have_text("Forked: this is the new run.")
    fork_id = tab.url.split("/runs/", 1)[1].split("?", 1)[0]
    assert fork_id != source
    fork = server.wait_status(fork_id, "completed")
    assert fork["lineage"]["forkedFrom"]["runId"] == source
    expect(tab.locator(".sec-details dt", has_text="Forked from")).to_have_count(1)
    expect(tab.locator(".sec-details dd", has_text=source)).to_contain_text("at node one")
    _shot(tab, tmp_path, "run-fork")


def test_every_control_has_a_name_and_the_dark_scheme_is_used(
    server: ServerProcess, page_url: PageUrl, tmp_path: Path
) -> None:
    """No button, link, field or list box without an accessible name on the run and the
    list pages; a dark system scheme gets the dark colours."""
    run_id = _waiting(server)
    controls = "a, button, input:not([type=hidden]), select, textarea, summary"
    unnamed = """(query) => [...document.querySelectorAll(query)].filter(e => {
          const named = (e.getAttribute('aria-label') || '').trim() ||
            (e.labels && [...e.labels].some(l => l.textContent.trim())) ||
            (e.textContent || '').trim();
          return !named;
        }).map(e => e.outerHTML.slice(0, 120))"""
    with chromium(tmp_path, dark=True) as context:
        tab = context.new_page()
        tab.goto(page_url.url)
        for path in ("/", f"/runs/{run_id}", "/schedules"):
            tab.goto(page_url.base + path)
            assert tab.evaluate(unnamed, controls) == [], path
        tab.goto(f"{page_url.base}/runs/{run_id}")
        background = tab.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(13, 17, 23)"
        _shot(tab, tmp_path, "run-dark")


def test_schedules_are_listed_paused_and_resumed_from_the_page(
    server: ServerProcess, page_url: PageUrl, browser: Any, tmp_path: Path
) -> None:
    """The schedule page lists a schedule with its next fire; its button pauses it, then
    resumes it; its own page lists its fires."""
    done = server.cli("schedule", "add", "hourly", "quick", "--every", "1h", "--input", "{}")
    assert done.returncode == 0, done.stderr
    tab = browser
    tab.goto(page_url.base + "/schedules")
    row = tab.locator("tbody tr", has_text="hourly")
    expect(row).to_contain_text("every 1h")
    expect(row).to_contain_text("active")
    _shot(tab, tmp_path, "schedules")
    row.get_by_role("button", name="Pause schedule hourly").click()
    expect(tab.locator("tbody tr", has_text="hourly")).to_contain_text("paused")
    with server.client() as client:
        assert client.get_schedule("hourly")["schedule"]["status"] == "paused"
    tab.locator("tbody tr", has_text="hourly").get_by_role(
        "button", name="Resume schedule hourly"
    ).click()
    with server.client() as client:
        wait_for(
            lambda: client.get_schedule("hourly")["schedule"]["status"] == "active",
            10,
            "the schedule to be active again",
        )
    tab.get_by_role("link", name="hourly").click()
    expect(tab.locator("h1")).to_contain_text("Schedule hourly")


def test_an_upgrade_shows_its_dry_run_first_then_carries_it_out(
    server: ServerProcess, page_url: PageUrl, browser: Any, tmp_path: Path
) -> None:
    """After the workflow's file changed, the upgrade page shows what `run upgrade
    --dry-run` says and changes nothing; its button upgrades the run."""
    run_id = _waiting(server)
    source = server.project / ".pi" / "workflows" / "ask.workflow.py"
    source.write_text(source.read_text().replace("How many reviewers?", "How many, now?"))
    tab = browser
    tab.goto(f"{page_url.base}/runs/{run_id}")
    tab.get_by_role("link", name="Upgrade… (dry run first)").click()
    expect(tab.locator("h1")).to_contain_text("Upgrade")
    expect(tab.locator("#upgrade-possible")).to_have_text("yes")
    _shot(tab, tmp_path, "upgrade")
    with server.client() as client:
        before = [e for e in client.history(run_id) if e["type"] == "run.upgraded"]
    assert before == [], "the dry run changed nothing"
    tab.get_by_role("button", name="Upgrade the run").click()
    expect(tab.locator("#notice")).to_have_text("Upgraded to the workflow's current code.")
    with server.client() as client:
        upgraded = [e for e in client.history(run_id) if e["type"] == "run.upgraded"]
    assert len(upgraded) == 1
    receipts = server.query(
        "SELECT client_id FROM server_commands WHERE operation = 'run.upgrade' AND run_id = ?",
        run_id,
    )
    assert receipts == [("web:ui",)], "one receipted command of the page's client"


HOLD = """
import time
from pathlib import Path
from pi_workflows import Workflow, action, manual_effect

STARTED = Path({started!r})
RELEASE = Path({release!r})

def send(ctx):
    STARTED.write_text("started")
    while not RELEASE.exists():
        time.sleep(0.02)  # only the pause's stop ends it
    return {{"sent": True}}

workflow = Workflow(
    "hold", start="send", nodes={{"send": action(send, effect=manual_effect("send"))}}, edges=[]
)
"""


def test_an_ambiguous_effect_is_resolved_from_the_page(
    server: ServerProcess, page_url: PageUrl, browser: Any, tmp_path: Path
) -> None:
    """A manual effect stopped mid-body by a pause is ambiguous; a result that is not JSON is
    refused on the page and nothing is stored; `applied` with a JSON result settles it, the
    page shows it applied, and the run resumes past the effect with that result."""
    started, release = tmp_path / "started", tmp_path / "release"
    server.write_workflow("hold", HOLD.format(started=str(started), release=str(release)))
    run_id = server.start_run("hold")
    wait_for(started.exists, 60, "the effect's body to start")
    with server.client() as client:
        client.pause(run_id)
    server.wait_status(run_id, "ambiguous")
    wait_for(lambda: server.run(run_id)["runner"] is None, 60, "the runner to be gone")
    release.write_text("go")
    [effect] = server.run(run_id)["effects"]
    assert effect["status"] == "ambiguous"
    tab = browser
    tab.goto(f"{page_url.base}/runs/{run_id}")
    _live(tab)
    form = tab.locator("form.resolve")
    form.get_by_label("applied", exact=True).check()
    form.get_by_label("Result (JSON, for applied)").fill("{not json")
    form.get_by_role("button", name="Resolve the effect").click()
    expect(tab.locator("#problem")).to_contain_text("nothing was sent")
    assert [e["status"] for e in server.run(run_id)["effects"]] == ["ambiguous"]
    form = tab.locator("form.resolve")
    form.get_by_label("applied", exact=True).check()
    form.get_by_label("Result (JSON, for applied)").fill('{"sent": true, "by": "page"}')
    form.get_by_label("Reason").fill("checked the outbox")
    form.get_by_role("button", name="Resolve the effect").click()
    expect(tab.locator("#notice")).to_contain_text("esolved")
    [settled] = server.run(run_id)["effects"]
    assert settled["status"] == "applied"
    assert server.run(run_id)["status"] == "paused"
    expect(tab.locator("form.resolve")).to_have_count(0)
    tab.get_by_role("button", name="Resume").click()
    done = server.wait_status(run_id, "completed")
    assert done["output"] == {"sent": True, "by": "page"}
