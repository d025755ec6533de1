"""The local cluster supervisor: cluster specs, node processes, their state on disk."""
