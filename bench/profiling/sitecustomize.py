"""cProfile for the bench's profile section, loaded by ``site`` via ``PYTHONPATH``.

Active only when ``PIWF_BENCH_PROFILE_DIR`` is set, and only in a pi-workflows server
(``-m pi_workflows.server``) or runner (``-m pi_workflows.runner``) process; every other
interpreter that inherits the path is left alone.

- Server: profiling starts on SIGUSR1 (after the bench's warm-up) and is written to
  ``server-<pid>.prof`` on SIGUSR2, so only the measured runs are in it.
- Runner: profiling covers the whole process (imports included) and is written to
  ``runner-<pid>.prof`` just before ``os._exit`` (the runner exits that way), or at exit.
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
    if not _DIRECTORY or module not in ("pi_workflows.server", "pi_workflows.runner"):
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
    path = os.path.join(_DIRECTORY, f"runner-{pid}.prof")
    real_exit = os._exit
    done = []

    def write() -> None:
        if not done:
            done.append(True)
            profiler.disable()
            profiler.dump_stats(path)

    def exit_after_writing(code: int) -> None:
        write()
        real_exit(code)

    os._exit = exit_after_writing
    atexit.register(write)
    profiler.enable()


_install()
