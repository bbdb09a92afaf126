"""cProfile for the bench's profile section, loaded by ``site`` via ``PYTHONPATH``.

Active only when ``PIWF_BENCH_PROFILE_DIR`` is set, and only in a pi-workflows server
(``-m pi_workflows.server``) or runner (``-m pi_workflows.runner``) process; every other
interpreter that inherits the path is left alone.

- Server: profiling starts on SIGUSR1 (after the bench's warm-up) and is written to
  ``server-<pid>.prof`` on SIGUSR2, so only the measured runs are in it.
- Runner: profiling covers the whole process (imports included) and is written to
  ``runner-<pid>.prof`` just before ``os._exit`` (the runner exits that way), or at exit.
  A runner forked from the runner template (``-m pi_workflows.runner.template``) is
  profiled from its fork on.
"""

from __future__ import annotations

import atexit
import cProfile
import os
import signal
import sys

_DIRECTORY = os.environ.get("PIWF_BENCH_PROFILE_DIR")
_ARGV = list(getattr(sys, "orig_argv", []))


def _module() -> str | None:
    if "-m" in _ARGV:
        index = _ARGV.index("-m")
        if index + 1 < len(_ARGV):
            return _ARGV[index + 1]
    return None


def _install() -> None:
    module = _module()
    if not _DIRECTORY:
        return
    if module == "pi_workflows.runner.template":
        # Runners are forked from the template: profile each child from its fork (the
        # template's imports are not the runner's cost any more). Resolver children are
        # profiled too; they exit before the runs' runners, and the section counts runners
        # of the measured runs only (files newer than its start, one per run).
        os.register_at_fork(after_in_child=lambda: _profile_child("runner"))
        return
    if module not in ("pi_workflows.server", "pi_workflows.runner"):
        return
    profiler = cProfile.Profile()
    pid = os.getpid()
    if module == "pi_workflows.server":
        path = os.path.join(_DIRECTORY, f"server-{pid}.prof")

        def begin(signum: int, frame: object) -> None:
            profiler.enable()

        def dump(signum: int, frame: object) -> None:
            profiler.disable()
            profiler.dump_stats(path + ".tmp")
            os.replace(path + ".tmp", path)

        signal.signal(signal.SIGUSR1, begin)
        signal.signal(signal.SIGUSR2, dump)
        return
    _profile_child("runner", profiler)


def _profile_child(kind: str, profiler: cProfile.Profile | None = None) -> None:
    """Profile this process from now until it exits through ``os._exit`` (or at exit)."""
    assert _DIRECTORY is not None
    profiler = profiler or cProfile.Profile()
    pid = os.getpid()
    real_exit = os._exit
    done = []

    def write() -> None:
        if not done:
            done.append(True)
            profiler.disable()
            # A forked child says what it became in sys.argv (the template sets it).
            name = "resolver" if sys.argv and sys.argv[0].endswith("resolve.py") else kind
            profiler.dump_stats(os.path.join(_DIRECTORY, f"{name}-{pid}.prof"))

    def exit_after_writing(code: int) -> None:
        write()
        real_exit(code)

    os._exit = exit_after_writing
    atexit.register(write)
    profiler.enable()


_install()
