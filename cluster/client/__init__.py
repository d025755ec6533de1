"""RocketDesk's asyncio RocketMQ client: producer, consumers and admin, over cluster.remoting."""
