"""The OpenTelemetry resource every span and metric of this process carries.

Imports the SDK: import only when export is on. ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` apply as the SDK reads them; without a service name the
resource says ``pi-workflows``.
"""

from __future__ import annotations

from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource

from pi_workflows.otel.settings import DEFAULT_SERVICE_NAME


def resource(version: str) -> Resource:
    """The resource: the environment's attributes, our version, and a default name."""
    found = Resource.create({SERVICE_VERSION: version})
    name = str(found.attributes.get(SERVICE_NAME, ""))
    if not name or name.startswith("unknown_service"):
        found = found.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return found
