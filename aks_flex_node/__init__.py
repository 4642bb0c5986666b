"""aks-flex-node: join a non-Azure Debian/Ubuntu machine to an AKS cluster (through Azure Arc or a FlexNodes agent pool)."""

__version__ = "0.1.1"
