"""`python -m pi_workflows.channels`: the channel process (`process.main`)."""

from pi_workflows.channels.process import main

main()
