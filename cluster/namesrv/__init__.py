"""The name server: route tables (``route_info``), KV config, request processors and the process."""
