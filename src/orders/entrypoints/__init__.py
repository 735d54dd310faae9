"""Thin hosts: decode input, call the core, map the result."""
