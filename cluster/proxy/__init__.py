"""The 5.x gRPC endpoint (RocketMQ's proxy in cluster mode): apache.rocketmq.v2.MessagingService
for 5.x clients, remoting to the name servers and brokers behind it."""
