"""Hostile-request fuzzing of real name-server, broker and HA processes (see hostile.py)."""
