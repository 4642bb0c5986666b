"""A loopback emulator of the Azure services aks-flex-node talks to (ARM, Entra ID, Arc HIMDS),
plus a kube-apiserver stand-in and a release-file mirror. Run: python3 -m tests.emulator --help.

Tests use it through tests/emulator_fixtures.py; the well-known identities are in
tests.emulator.constants.
"""
