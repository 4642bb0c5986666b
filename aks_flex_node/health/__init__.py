"""What the node tells its operator about its health after each run: credential
lifetimes (credentials.py) and the node-exporter textfile (metrics.py)."""
