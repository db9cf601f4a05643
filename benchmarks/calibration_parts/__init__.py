"""The parts of benchmarks/calibration.py (the command and its options stay there), grouped by
what they calibrate:

- common: what every part shares — the table of results, rates and their intervals, the designs
  and series makers, and the run-time settings no public parameter carries (rules_set,
  growth_scales, group_curve: set for a block, restored after).
- growth_words: growth intervals and the status words (--part status, growth, two-scale, pooled,
  pooled-short, growth-frontier).
- comparisons: group comparisons, sequential looks, the Tor verdict, identical series and the
  gates (--part compare, sequential, tor-verdict, identical, gates).
- ratchet: "Growing in steps" (Ratcheting), its own, group and shared routes (--part staircases,
  staircase-reach, ratchet-climbs, ratchet-group, noise-shapes, ratchet-shared, ratchet-shape).
- ratchet_designs: what other designs of that rule would reach (--part ratchet-bound,
  ratchet-ceiling, ratchet-combine, ratchet-curve).
- scenarios: TorUtils datasets through the user path (--part scenarios, cycles, user-path,
  pooled-path, ratchet-restarts).
- beside: growth beside the baseline through the user path (--part beside, beside-cycle-restart).
- fleet: fleet experiments (--part fleet-realism, benchmarks/fleet_realism.py).
"""
