"""The desktop console: PySide6 views over models that talk to the supervisor and the admin
client (asyncio, driven by qasync on Qt's event loop)."""
