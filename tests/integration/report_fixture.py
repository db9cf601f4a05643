"""One real short run for the reporter tests: three groups of four replicas (glibc, jemalloc, a
program that frees with MADV_FREE so LazyFree is sampled), warm-up/load/idle phases, and an
experiment file carrying markup that must come out as text."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli
from tests.experiments import experiment_toml, frag

HOSTILE_COMMENT = "# markup in a comment: </script><script>window.__pwned = 1</script> & <b>bold</b> </pre>"


def experiment_text(native_dir: Path, test_native_dir: Path, jemalloc: str) -> str:
    lazy = [str(test_native_dir / "lazyfree"), "--mb", "24", "--free-mb", "16", "--seconds", "120"]
    return (
        HOSTILE_COMMENT
        + "\n"
        + experiment_toml(
            "reporters",
            frag(native_dir, mb=8, idle=60),
            {"glibc": "glibc", "jemalloc": jemalloc, "lazy": {"allocator": "glibc", "command": lazy}},
            replicas=4,
            interval="0.5s",
            seed=5,
            baseline="glibc",
            phases={"warmup": "1s", "load": "4s", "idle": "2s"},
        )
    )


def make_run(tmp: Path, native_dir: Path, test_native_dir: Path, jemalloc: str) -> Path:
    exp = tmp / "exp.toml"
    exp.write_text(experiment_text(native_dir, test_native_dir, jemalloc))
    proc = run_cli("run", str(exp), "-o", str(tmp / "run"), "--no-report")
    assert proc.returncode == 0, proc.stderr
    return tmp / "run"
