"""Readiness over the protocol (never a sleep): a name server answers, a broker answers and is
registered with every name server, a slave is replicating from its master, a proxy answers a
5.x heartbeat."""

from __future__ import annotations

import asyncio
import json

import grpc

from cluster.remoting import fastjson
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError

# An empty HeartbeatRequest is zero bytes on the wire: the probe needs no generated classes.
_HEARTBEAT = "/apache.rocketmq.v2.MessagingService/Heartbeat"


class Prober:
    def __init__(self, timeout: float = 1.0) -> None:
        self.client = RemotingClient()
        self.timeout = timeout

    async def close(self) -> None:
        await self.client.close()

    async def namesrv_ready(self, address: str) -> bool:
        return await self._cluster_info(address) is not None

    async def _cluster_info(self, address: str) -> dict | None:
        try:
            answer = await self.client.invoke(address, request(RequestCode.GET_BROKER_CLUSTER_INFO),
                                              self.timeout)
        except RemotingError:
            return None
        if answer.code != ResponseCode.SUCCESS:
            return None
        return fastjson.loads(answer.body.decode()) if answer.body else {}

    async def broker_runtime(self, address: str) -> dict | None:
        try:
            answer = await self.client.invoke(address, request(RequestCode.GET_BROKER_RUNTIME_INFO),
                                              self.timeout)
        except RemotingError:
            return None
        if answer.code != ResponseCode.SUCCESS:
            return None
        return json.loads(answer.body)["table"]

    async def broker_registered(self, address: str, namesrvs: list[str]) -> bool:
        for namesrv in namesrvs:
            info = await self._cluster_info(namesrv)
            if info is None:
                return False
            addrs = {a for data in (info.get("brokerAddrTable") or {}).values()
                     for a in (data.get("brokerAddrs") or {}).values()}
            if address not in addrs:
                return False
        return True

    async def ha_status(self, address: str) -> dict | None:
        try:
            answer = await self.client.invoke(address, request(RequestCode.GET_BROKER_HA_STATUS),
                                              self.timeout)
        except RemotingError:
            return None
        if answer.code != ResponseCode.SUCCESS:
            return None
        return json.loads(answer.body)

    async def proxy_ready(self, address: str) -> bool:
        """The proxy answers a 5.x Heartbeat over gRPC."""
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                call = channel.unary_unary(_HEARTBEAT, request_serializer=bytes,
                                           response_deserializer=bytes)
                await asyncio.wait_for(call(b"", timeout=self.timeout), self.timeout + 0.5)
        except (grpc.RpcError, TimeoutError, OSError):
            return False
        return True

    async def slave_replicating(self, address: str) -> bool:
        status = await self.ha_status(address)
        return bool(status) and status.get("haClientRuntimeInfo", {}).get("state") == "TRANSFER"
