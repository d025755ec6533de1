"""The broker: metadata managers, request processors, long polling, registration, the process."""
