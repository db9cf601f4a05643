"""Experiments derived from a base one and driven over many runs: `alloclab bisect` (bisection,
bisect_report) and `alloclab sweep` (sweep, sweep_report), both built by derive."""
