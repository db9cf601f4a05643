"""alloclab's native programs (C sources and their one Makefile) and their build on first use (build)."""
