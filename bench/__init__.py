"""The pi-workflows benchmark suite: ``python -m bench`` (``make bench``).

Measures pi-workflows through its real server, real runner children and the public client,
beside physical floors (a durable SQLite commit, a Unix-socket round trip, an interpreter
spawn) and peers (DBOS Transact and LangGraph, in their own venv ``bench/.venv-peers``), in
the same invocation, interleaved. Sections: ``nodes`` (durable node-transition overhead),
``start`` (start latency), ``recovery`` (after SIGKILL), ``parked`` (many runs waiting at a
checkpoint), ``timers`` (retries with no delay, ``run.signal``, 10,000 sleeping runs and
1,000 timers due in one second), ``throughput`` (many runs at capacity 4 and 16, beside
DBOS's queue), ``pi``
(the Pi bridge), ``profile`` (cProfile of the server and runners). Results go to
``bench/results/latest.json``, ``latest.md`` (opening with the performance issue's targets,
each met or not) and ``latest.png``.

Modules: ``cli`` (options, orchestration), ``context`` (sizes, shared state), ``processes``
(spawning and cleanup), ``ourserver`` (a server in a temp state directory), ``workflows``
(the workflow files), ``floors``, ``peers`` (the peer venv and workers), ``machine``,
``stats``, ``fsyncs`` (commits from the WAL and fsync calls with strace, per node),
``targets`` (the targets table), ``report`` (markdown), ``chart``; ``sections/`` one
module per section;
``peer_scripts/`` run with the peer venv's python; ``profiling/sitecustomize.py`` profiles
the server and runners.
"""
