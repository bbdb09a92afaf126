"""Workflow sources: discovery, loading, source identity and mounted-source verification.

Imports only ``pi_workflows.authoring`` and ``pi_workflows.engine``. Loading executes
workflow code, so it runs only in the resolver and runner children (and tests), never in
the server.

- ``discover(project_dir, user_dir=None)`` lists project, user and built-in workflows.
- ``resolve(spec, project_dir, user_dir=None)`` turns a name, ``builtin:NAME`` or a path
  into a ``WorkflowRef``.
- ``load(ref)`` imports the file in isolation and returns a ``LoadedWorkflow`` (workflow,
  identity, mounted map, snapshot, digest).
- ``verify_and_load(ref, identity, mounted)`` does the same only if every source is
  byte-identical to the recorded ones, else raises ``WorkflowSourceChanged`` before any
  changed code runs.

Modules: ``discovery``, ``loader``, ``importer`` (the import hook), ``identity``,
``summary`` (a file's one-line summary, read without running it), ``errors``, and
``builtins/`` (the shipped ``NAME.workflow.py`` files).
"""

from pi_workflows.sources.discovery import (
    BUILTIN_PREFIX,
    BUILTINS_DIR,
    PROJECT_SUBDIR,
    WORKFLOW_SUFFIX,
    WorkflowOrigin,
    WorkflowRef,
    builtin_names,
    default_user_dir,
    discover,
    resolve,
    workflow_name,
)
from pi_workflows.sources.errors import (
    DuplicateWorkflowError,
    LoadProblem,
    WorkflowLoadError,
    WorkflowNotFoundError,
    WorkflowSourceChanged,
    WorkflowSourceError,
)
from pi_workflows.sources.identity import SourceIdentity, SourceKind
from pi_workflows.sources.importer import sha256_hex
from pi_workflows.sources.loader import (
    LoadedWorkflow,
    identity_of,
    load,
    ref_for_identity,
    verify_and_load,
)
from pi_workflows.sources.summary import summary_line

__all__ = [
    # finding workflows
    "discover",
    "resolve",
    "default_user_dir",
    "builtin_names",
    "workflow_name",
    "summary_line",
    "WorkflowRef",
    "WorkflowOrigin",
    "WORKFLOW_SUFFIX",
    "BUILTIN_PREFIX",
    "BUILTINS_DIR",
    "PROJECT_SUBDIR",
    # loading and verifying
    "load",
    "verify_and_load",
    "ref_for_identity",
    "identity_of",
    "LoadedWorkflow",
    "SourceIdentity",
    "SourceKind",
    "sha256_hex",
    # errors
    "WorkflowSourceError",
    "WorkflowNotFoundError",
    "DuplicateWorkflowError",
    "LoadProblem",
    "WorkflowLoadError",
    "WorkflowSourceChanged",
]
