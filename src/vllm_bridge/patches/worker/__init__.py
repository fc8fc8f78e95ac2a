"""Patches of the `worker` stage (see docs/patches.md)."""
