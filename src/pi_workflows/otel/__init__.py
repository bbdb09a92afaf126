"""OpenTelemetry export: the optional extra ``pi-workflows[otel]`` (docs/observability.md).

Layout: ``settings`` reads the standard ``OTEL_*`` environment variables and decides whether
export is on; ``ids`` derives the deterministic trace and span ids of runs and node attempts;
``records`` holds the plain span and metric records the server builds from committed events.
None of those three imports OpenTelemetry. ``sdk`` (the server's exporters and meters) and
``context`` (a runner's current span while a node callback runs) do, and are imported only
when ``settings`` says export is on. This package imports no other internal package.
"""
