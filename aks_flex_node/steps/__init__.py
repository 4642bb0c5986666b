"""The bootstrap steps, one module per concern, and the ordered list the runner walks."""
