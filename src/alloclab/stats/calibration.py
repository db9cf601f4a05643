"""Simulators of realistic memory series for calibration (benchmarks/calibration.py, tests)."""
from __future__ import annotations
