"""The fleet simulation: N nodes join one emulated subscription at once, under ARM's
documented throttling, then leave; `python3 -m tests.fleet N` (docs/fleet.md)."""
