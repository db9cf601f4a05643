"""Fleet mode on live systemd services: the plan/deploy/rollback life cycle (plan, deploy, through
the systemd seam), the collector (with its native reader, fleetread), the rollout guards, and the
unit-file, sandbox and root-file helpers they share."""
