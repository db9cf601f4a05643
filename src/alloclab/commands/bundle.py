"""`alloclab bundle RUN`: one archive for an upstream report (alloclab.interchange.bundle)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console


def bundle_command(run_dir: Path, output: Path | None, console: Console, traces: list[Path] = ()) -> None:
    from ..interchange import bundle

    path, names = bundle.write_bundle(run_dir, output, traces)
    console.print(
        f"bundle: {path} ({len(names)} files, the run's store included: extract it and `alloclab compare "
        f"{names[0].split('/')[0]} OTHER_RUN`)",
        markup=False,
        highlight=False,
    )
