"""Section: the web page (`pi-workflows ui`) with many runs, a wide fan-out, and a commit's
way to a browser.

Runs in the bench process. One server with default settings; the page process is the one
the real `pi-workflows ui --no-browser` starts.

1. **Runs**: ``ui_runs`` runs parked at a checkpoint (started by ``parked_clients`` client
   threads), then the run list's first page (`GET /`: the filtered page, the counts per
   status and the runs that need a person, rendered), timed from the bench over loopback
   (the request's whole time at the page: the page's server time plus one local round
   trip), ``ui_reps`` times; the list's fragment (`/runs/list`, what a live list fetches)
   too.
2. **Fan-out**: a run whose ``fan_out`` started ``children_join`` children (all ended);
   its page's first load (``cold``: the page opens the run's watch, waits for the server's
   first view and renders every section) once, and reloads (``warm``: the watch is open,
   the sections are current) ``ui_reps`` times.
3. **Latency**: a real headless Chromium (Debian's, through Playwright) shows a parked run;
   the bench pauses and resumes it through the client, ``ui_latency_reps`` times each; each
   sample is the browser's wall clock when the status on the page changed (a
   MutationObserver's `Date.now()`) minus the server's commit time of that change (the
   event's `at`): commit -> server push -> page render -> event stream -> the page.
4. **Memory**: the page process's RSS idle after start, and after all of the above.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import tempfile
import time
from typing import Any
from urllib.parse import urlsplit

import psutil

from bench.context import Context
from bench.ourserver import BenchError, OurServer
from bench.sections.parked import _Starter
from bench.stats import figure
from bench.workflows import write_fan_out, write_park

FAN_CAPACITY = 16
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


class _Page:
    """The page process a `pi-workflows ui` started, signed in with its cookie."""

    def __init__(self, server: OurServer) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "pi_workflows.cli.main", "--home", str(server.home), "ui",
             "--no-browser"],
            env=server.env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise BenchError(f"pi-workflows ui failed: {done.stderr.strip()}")
        self.url = done.stdout.strip()
        split = urlsplit(self.url)
        assert split.port is not None
        self.port = split.port
        self.pid = int(json.loads((server.home / "ui.json").read_text())["pid"])
        status, headers, _ = self.get(f"{split.path}?{split.query}", cookie=None)
        if status != 303:
            raise BenchError(f"the page refused its own address: {status}")
        self.cookie = headers["Set-Cookie"].split(";", 1)[0]

    def get(self, path: str, cookie: str | None = "") -> tuple[int, dict[str, str], float]:
        """One GET; its status, headers and milliseconds."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        headers = {"Host": f"127.0.0.1:{self.port}"}
        if cookie == "":
            headers["Cookie"] = self.cookie
        try:
            began = time.perf_counter()
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            response.read()
            took = (time.perf_counter() - began) * 1000
            return response.status, dict(response.getheaders()), took
        finally:
            connection.close()

    def timed(self, path: str, reps: int) -> list[float]:
        found = []
        for _ in range(reps):
            status, _, took = self.get(path)
            if status != 200:
                raise BenchError(f"GET {path} answered {status}")
            found.append(took)
        return found

    def rss_mb(self) -> float:
        return round(psutil.Process(self.pid).memory_info().rss / 2**20, 1)


def _park_many(ctx: Context, server: OurServer, count: int) -> float:
    workflow = write_park(server.project)
    starter = _Starter(server, str(workflow), count, ctx.sizes.parked_clients)
    began = time.monotonic()
    starter.start()
    while True:
        starter.waiting = server.client.count_runs().get("waiting", 0)
        if starter.errors:
            raise BenchError(starter.errors[0])
        if not starter.alive() and starter.waiting >= len(starter.run_ids):
            break
        if time.monotonic() - began > 900:
            raise BenchError(f"only {starter.waiting} of {count} runs parked in 900 s")
        time.sleep(0.2)
    starter.join()
    return round(time.monotonic() - began, 1)


def _latency(ctx: Context, server: OurServer, page: _Page, reps: int) -> list[float]:
    """Commit -> browser samples (ms), pausing and resuming one parked run."""
    from playwright.sync_api import sync_playwright

    run_id = str(server.client.start_run(str(write_park(server.project)), {})["runId"])
    server.wait_run(run_id, until=frozenset({"waiting"}), timeout=60, poll=0.02)
    samples: list[float] = []
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            bypass_csp=True,  # the bench's own probes (wait_for_function) are evaluated
        )
        try:
            tab = context.new_page()
            tab.goto(page.url)
            tab.goto(f"http://127.0.0.1:{page.port}/runs/{run_id}")
            tab.wait_for_function("document.getElementById('live-state').textContent === 'Live'")
            tab.evaluate(
                """() => { window.seen = [];
                new MutationObserver(() => {
                  const s = document.getElementById('run-status');
                  if (s) window.seen.push([s.textContent, Date.now()]);
                }).observe(document.body, {subtree: true, childList: true, characterData: true});
                }"""
            )
            for index in range(reps * 2):
                wanted = "paused" if index % 2 == 0 else "waiting"
                if wanted == "paused":
                    server.client.pause(run_id)
                else:
                    server.client.resume(run_id)
                tab.wait_for_function(
                    f"window.seen.some(([s, t]) => s === '{wanted}' && t > (window.mark || 0))"
                )
                shown = tab.evaluate(
                    f"window.seen.filter(([s, t]) => s === '{wanted}' && t > (window.mark || 0))"
                    "[0][1]"
                )
                tab.evaluate(f"window.mark = {shown}")
                event = [
                    e for e in server.client.history(run_id)
                    if e["type"] in ("run.paused", "run.resumed", "run.waiting")
                ][-1]  # fmt: skip
                samples.append(float(shown) - float(event["at"]))
        finally:
            context.close()
    ctx.say(f"ui: {len(samples)} commit -> browser samples")
    return samples


def run(ctx: Context) -> dict[str, Any]:
    """Measure and summarise; see the module docstring."""
    sizes = ctx.sizes
    server = OurServer(
        ctx.procs, ctx.section_dir("ui"), extra_env={"PI_WORKFLOWS_MAX_RUNNERS": str(FAN_CAPACITY)}
    ).start()
    try:
        page = _Page(server)
        idle_mb = page.rss_mb()
        ctx.say(f"ui: parking {sizes.ui_runs} runs")
        park_seconds = _park_many(ctx, server, sizes.ui_runs)
        first_page = page.timed("/", sizes.ui_reps)
        fragment = page.timed("/runs/list", sizes.ui_reps)
        ctx.say(f"ui: a fan_out of {sizes.children_join}")
        fan = write_fan_out(server.project, FAN_CAPACITY)
        parent = str(server.client.start_run(str(fan), {"children": sizes.children_join})["runId"])
        view = server.wait_run(parent, timeout=900, poll=0.05)
        if view.get("status") != "completed":
            raise BenchError(f"the fan_out ended {view.get('status')}")
        cold = page.timed(f"/runs/{parent}", 1)
        warm = page.timed(f"/runs/{parent}", sizes.ui_reps)
        latency = _latency(ctx, server, page, sizes.ui_latency_reps)
        busy_mb = page.rss_mb()
    finally:
        server.stop()
    return {
        "runs": sizes.ui_runs,
        "parkSeconds": park_seconds,
        "firstPageMs": figure(first_page),
        "listFragmentMs": figure(fragment),
        "fanOutChildren": sizes.children_join,
        "fanOutColdMs": round(cold[0], 1),
        "fanOutWarmMs": figure(warm),
        "commitToBrowserMs": figure(latency),
        "pageRssMb": {"idle": idle_mb, "after": busy_mb},
    }


def render(section: dict[str, Any], fmt: Any) -> list[str]:
    """The section's part of ``latest.md`` (``fmt`` formats a figure)."""
    lines = ["## The web page (`pi-workflows ui`)", ""]
    if "error" in section:
        return [*lines, f"FAILED: {section['error']}", ""]
    return [
        *lines,
        "| measure | ms, median [min-max] |",
        "|---|---|",
        f"| runs page, first page with {section['runs']} runs | {fmt(section['firstPageMs'])} |",
        f"| runs list fragment (a live list's refetch) | {fmt(section['listFragmentMs'])} |",
        f"| run page of a {section['fanOutChildren']}-child fan-out, first load |"
        f" {section['fanOutColdMs']} |",
        f"| the same, reloaded | {fmt(section['fanOutWarmMs'])} |",
        f"| commit -> browser (a pause or resume shown) | {fmt(section['commitToBrowserMs'])} |",
        "",
        f"- page process RSS: {section['pageRssMb']['idle']} MB idle after start,"
        f" {section['pageRssMb']['after']} MB after the measures above",
        f"- {section['runs']} runs parked in {section['parkSeconds']} s",
        "",
    ]
