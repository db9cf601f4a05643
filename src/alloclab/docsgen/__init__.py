"""The reference pages generated from the code: the CLI, exit codes and man page (reference) and the
metrics and alerts (metrics). `python -m alloclab.docsgen.reference` writes them all."""
