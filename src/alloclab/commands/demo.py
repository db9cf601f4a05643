"""`alloclab demo`: the README's main job — real, short comparisons with a report at the end.

Two experiments on the built-in models (docs/workloads.md): tor-dircache, then worker-pool, each
under glibc, jemalloc 5.3.0, mimalloc 2.0.9, 3.0.1 and the newest 3.x in the catalog. The
allocators are provisioned first (Debian packages from the machine's own mirror, cached).
"""
from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..allocators.resolution import BUILDS
from .. import outputs, timefmt
from ..errors import UserError
from .run import run_command

DATA = Path(__file__).resolve().parent.parent / "data"
DEMOS = (("tor-dircache", "demo-tor.toml", 0.55), ("worker-pool", "demo-pool.toml", 0.45))
ALLOCATORS = ("jemalloc@5.3.0", "mimalloc@2.0.9", "mimalloc@3.0.1", "mimalloc@3.6.1")


def experiment_text(template: str, total: int) -> str:
    """The experiment file of one demo part lasting `total` seconds (also benchmarks/main_job.py's)."""
    warmup, idle = max(10, total // 5), max(10, total // 5)   # warm-up covers the models' ramp
    return (DATA / template).read_text().format(warmup=f"{warmup}s", load=f"{total - warmup - idle}s", idle=f"{idle}s")


def demo_command(output: Path | None, seconds: int, console: Console) -> int:
    if seconds < 60:
        raise UserError(f"--seconds {seconds} is too short for two comparisons", "give at least 60 seconds")
    out = output or Path("runs") / f"demo-{timefmt.local_stamp()}"
    outputs.new_output(out)
    outputs.writable_directory(out)             # before the allocators are provisioned
    console.print("provisioning allocators: " + ", ".join(ALLOCATORS))
    for allocator_id in ALLOCATORS:
        b = BUILDS.library(allocator_id, lambda step, i=allocator_id: console.print(f"  {i}: {step}"))
        console.print(f"  {allocator_id}: {b}")
    code = 0
    for label, template, share in DEMOS:
        total = int(seconds * share)
        (out / label).mkdir(parents=True, exist_ok=True)
        exp_file = out / label / "experiment.toml"
        exp_file.write_text(experiment_text(template, total))
        console.rule(f"demo: {label} ({total} s)")
        code = run_command(exp_file, out / label / "run", False, None, "60s", False, console) or code
        if code == 130:
            break
    console.print(f"demo reports: {out}/*/run/report.md (interactive: report.html beside each)")
    return code
