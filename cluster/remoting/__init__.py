"""RocketMQ's remoting protocol: a sans-I/O codec (``codec``) and a thin asyncio adapter.

House rule: ``codes``, ``codec`` and ``errors`` import neither asyncio nor socket; only
``connection``, ``server`` and ``client`` touch a transport.
"""
