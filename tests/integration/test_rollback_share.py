"""`fleet rollback --batch 10%` (issue 52): a share of the units restored at once, as apply and
deploy take it; a bad share refused before any drop-in is touched."""

from __future__ import annotations

import pytest

from alloclab.common.errors import UserError
from alloclab.fleet import deploy, systemd
from tests.integration.test_fleet import NAMES, make_plan, root  # noqa: F401  (root: the fixture)


class RecordingUnits(systemd.LocalUnits):
    """Real local units whose restarts and state checks are recorded in order."""

    def __init__(self, r):
        super().__init__(r)
        self.restarts: list[str] = []
        self.calls: list[str] = []

    def restart(self, unit: str) -> None:
        self.restarts.append(unit)
        self.calls.append("restart")
        super().restart(unit)

    def is_active(self, unit: str) -> bool:
        self.calls.append("check")
        return super().is_active(unit)

    def restart_batches(self) -> list[int]:
        """The sizes of the runs of restarts between state checks: the batches."""
        return [len(run) for run in "".join("r" if c == "restart" else " " for c in self.calls).split() if run]


def test_rollback_by_share_restores_in_batches_of_that_share(root):
    plan = make_plan(root)
    deploy.apply_plan(systemd.LocalUnits(root), plan, batch=6, dry_run=False, say=lambda s: None)
    units = RecordingUnits(root)
    said = []
    with pytest.raises(UserError, match="--batch '0%' is not a batch size"):
        deploy.rollback(units, batch="0%", say=said.append)
    assert units.restarts == [] and said == [] and any(deploy.dropin_path(root, n).exists() for n in NAMES)
    deploy.rollback(units, batch="50%", say=said.append)
    assert sorted(units.restarts) == sorted(plan.data["units"]) and len(plan.data["units"]) == 6
    assert units.restart_batches() == [3, 3]  # 50% of 6 units at once
    assert not any(deploy.dropin_path(root, n).exists() for n in NAMES)
    assert all(units.is_active(u) for u in plan.data["units"])
