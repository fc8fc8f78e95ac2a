"""Serving one model with several workers: on Ray clusters of CPU machines."""
