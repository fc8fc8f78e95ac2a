"""Patches of the `platform` stage (see docs/patches.md)."""
