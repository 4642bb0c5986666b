"""The fault matrix (issue 9): kill -9 in every phase, ENOSPC on every write path, failing
Azure endpoints and artifacts, concurrent runs; each cell must converge once the fault is
gone and corrupt nothing. `python3 -m tests.faults` runs it all (docs/reliability.md);
tests/integration/test_faults.py runs the cells marked fast."""
