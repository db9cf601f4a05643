"""Every environment variable alloclab reads is read in settings.py and listed in docs/reference/settings.md."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from alloclab.common import settings

SRC = Path(settings.__file__).parents[1]  # the package: settings lives in alloclab/common
DOC = (SRC.parent.parent / "docs" / "reference" / "settings.md").read_text()
READ = re.compile(r"os\.environ\.get\(|os\.getenv\(|os\.environ\[|environ\.get\(")


def test_only_settings_reads_the_environment():
    readers = [
        f"{p.relative_to(SRC)}:{n}"
        for p in SRC.rglob("*.py")
        if p.name != "settings.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if READ.search(line)
    ]
    assert not readers, f"environment read outside settings.py: {readers}"


def test_every_variable_is_documented():
    names = [v for k, v in vars(settings).items() if k.isupper() and isinstance(v, str) and k != "_OFF"]
    c_reads = {m for p in (SRC / "native").glob("*.c") for m in re.findall(r'getenv\("([A-Z_]+)"\)', p.read_text())}
    assert len(names) >= 6 and {"ALLOCLAB_STATS", "ALLOCLAB_TRACE_FILE"} <= c_reads
    missing = [n for n in [*names, *c_reads] if f"`{n}`" not in DOC]
    assert not missing, f"not in docs/reference/settings.md: {missing}"


@pytest.mark.parametrize(
    "value,enabled",
    [("", True), ("on", True), ("off", False), ("OFF", False), ("0", False), ("no", False), ("false", False)],
)
def test_cgroups_setting(monkeypatch, value, enabled):
    monkeypatch.setenv(settings.CGROUPS, value)
    assert settings.cgroups_enabled() is enabled


def test_cache_root_order(monkeypatch, tmp_path):
    monkeypatch.setenv(settings.CACHE, str(tmp_path / "a"))
    monkeypatch.setenv(settings.XDG_CACHE_HOME, str(tmp_path / "x"))
    assert settings.cache_root() == tmp_path / "a"
    monkeypatch.delenv(settings.CACHE)
    assert settings.cache_root() == tmp_path / "x" / "alloclab"


def test_children_never_inherit_a_preload(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/tmp/evil.so")
    env = settings.environment_without_preload()
    assert "LD_PRELOAD" not in env and env.get("PATH") == os.environ.get("PATH")
