"""Seed 003: the model addresses and compresses its own numbered thread."""
