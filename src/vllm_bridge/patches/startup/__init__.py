"""Patches of the `startup` stage (see docs/patches.md)."""
