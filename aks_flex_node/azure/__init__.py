"""Everything that talks to Azure.

Import the submodules you need (`from aks_flex_node.azure import arc`). This file stays
empty on purpose: `aks-flex-node token` imports `aks_flex_node.azure.himds`, which runs
this file first, and that path must not pull in the Azure SDK (slow, and not needed to
read a token from the local HIMDS).
"""
