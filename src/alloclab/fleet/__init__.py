"""Fleet mode on live systemd services: the seam to the units (systemd), the plan (plan), apply, deploy
and rollback (deploy) with the canary judged against its peers (canary) and the rollout guards
(rollout); the collector with its native reader (collector, fleetread) and what each unit should run
(deployed); fleet status and deploy --from-run (decision, tested); the facts file (factschema) and
the unit-file and sandbox helpers (unitfile, unitaccess)."""
