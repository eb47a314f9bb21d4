"""The unit layer: decisions tested in one process, in virtual time (see conftest.py)."""
