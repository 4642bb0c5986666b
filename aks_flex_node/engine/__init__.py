"""The step protocol, the runner that walks steps, and the records a run leaves behind."""
