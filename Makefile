# Shortcuts for contributors (CONTRIBUTING.md). Everything runs from the venv scripts/install.sh makes.
PY := .venv/bin/python

.PHONY: test test-fast lint reference

# the README's test command (the suite CI runs, without the install step)
test:
	$(PY) -m pytest -q

# the unit tests, without the ones that ask a package registry or simulate many series (-m replaces the default's 'not slow')
test-fast:
	$(PY) -m pytest -q -p no:cacheprovider tests/unit -m 'not slow and not network and not simulation'

# the linter and the type checker, as configured in pyproject.toml
lint:
	.venv/bin/ruff check
	.venv/bin/ruff format --check
	.venv/bin/mypy

# rewrite the generated reference (docs/reference/) from the code
reference:
	$(PY) -m alloclab.docsgen.reference
