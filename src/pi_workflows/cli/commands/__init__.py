"""The command groups of `pi-workflows`, one module each; `main` registers them."""
