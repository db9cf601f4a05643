"""Studies over many runs: `alloclab bisect` (bisection), `alloclab sweep` (sweep), both built from a
base experiment by derive, and `alloclab gate` (gate), one run that decides a PR. Their outputs
are in alloclab.reporters (bisect, sweep)."""
