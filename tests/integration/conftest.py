"""Fixtures shared by the integration tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def report_run(tmp_path_factory, native_dir, test_native_dir, jemalloc):
    """A real short run (tests/integration/report_fixture.py), made once per session."""
    from tests.integration.report_fixture import make_run

    return make_run(tmp_path_factory.mktemp("report-run"), native_dir, test_native_dir, jemalloc)


@pytest.fixture(scope="session")
def report_input(report_run):
    """The run analysed once: the fixed input every reporter test renders."""
    from alloclab.reporters.report import prepare

    return prepare(report_run)
