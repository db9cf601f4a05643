"""CI meets what a new user meets (issue 45): .ci/run runs the README's test command verbatim,
then the README's main job with an empty allocator cache (a fresh ALLOCLAB_CACHE), so a pin whose
registry dropped it fails CI the day it goes."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _quick_start_commands() -> list[str]:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_ci_runs_the_readme_test_command_then_the_main_job_on_an_empty_cache():
    main_job, tests = _quick_start_commands()[:2]
    assert "pytest" in tests and "demo" in main_job
    ci = (REPO / ".ci" / "run").read_text()
    lines = [line.strip() for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert tests in lines  # verbatim
    demo = main_job.split("&&")[-1].strip()  # the main job after its install step
    run = next(line for line in lines if demo.split()[0] in line and " demo" in line)
    assert lines.index(run) > lines.index(tests)
    assert re.search(r'ALLOCLAB_CACHE="\$main_job/cache"', run)
    assert re.search(r"main_job=\$\(mktemp -d", ci)  # new each run: nothing built before
