"""`python -m pi_workflows.web`: the page process (`page.main`)."""

from pi_workflows.web.page import main

main()
