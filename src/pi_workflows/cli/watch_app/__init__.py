"""`pi-workflows watch`: the live terminal view (Textual), imported only by that command.

Layout: ``app`` (the application and its two screens: the run list and one run with its
graph), ``dialogs`` (confirmation, checkpoint answer and decision choice), ``feed``
(threads that read the server-pushed views and hand them to the screens).
"""

from pi_workflows.cli.watch_app.app import WatchApp

__all__ = ["WatchApp"]
