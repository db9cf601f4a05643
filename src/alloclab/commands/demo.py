"""`alloclab demo`: the README's main job — a real, short comparison with a report at the end."""
from __future__ import annotations

import glob
from pathlib import Path

from rich.console import Console

from ..errors import UserError
from .run import run_command

DEMO_FILE = Path(__file__).resolve().parent.parent / "data" / "demo.toml"


def system_library(soname: str, package: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/*/{soname}")) + sorted(glob.glob(f"/usr/lib/{soname}"))
    if not found:
        raise UserError(f"{soname} is not installed", f"install it: apt-get install {package} (or run scripts/install.sh)")
    return found[0]


def demo_command(output: Path | None, seconds: int, console: Console) -> int:
    if seconds < 30:
        raise UserError(f"--seconds {seconds} is too short for a comparison", "give at least 30 seconds")
    warmup, idle = max(5, seconds // 10), max(10, seconds // 4)
    text = DEMO_FILE.read_text().format(
        warmup=f"{warmup}s", load=f"{seconds - warmup - idle}s", idle=f"{idle}s",
        jemalloc=system_library("libjemalloc.so.2", "libjemalloc2"),
        mimalloc=system_library("libmimalloc.so.2", "libmimalloc2.0"))
    out = output or Path("runs") / "demo"
    if out.exists() and any(out.iterdir()):
        from datetime import datetime
        out = Path(f"{out}-{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    exp_file = out / "experiment.toml"
    exp_file.write_text(text)
    console.print(f"demo experiment: {exp_file}")
    run_dir = out / "run"
    return run_command(exp_file, run_dir, False, None, "60s", False, console)
