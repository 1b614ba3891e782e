"""The decoder and its block zoo. Public entry points live in `reslab` (see reslab/__init__.py)."""
