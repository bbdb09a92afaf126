"""``python -m pi_workflows.runner``: the runner child of one run generation (see ``main``).

Runs in the runner child; never opens the database.
"""

from pi_workflows.runner.main import run_process

if __name__ == "__main__":
    run_process()
