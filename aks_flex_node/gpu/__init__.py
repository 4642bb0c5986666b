"""Accelerators: what this machine has (detect.py, read from sysfs and procfs through the
Host) and what a node with one is given (steps/gpu.py: containerd's NVIDIA runtime, the
node's labels and taint; preflight: what is missing, with its remedy). docs/gpu.md."""
