"""Master/slave replication on RocketMQ 4.x's HA protocol (seed 004; reference §6)."""
