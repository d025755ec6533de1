"""Message filters the broker applies on pull: SQL92 property expressions (sql92.py)."""
