"""A raw WebSocket client (https://pypi.org/project/websockets/) on a Haul daemon's /jsonrpc:
calls as text messages, and every aria2 notification as it arrives.

    websocket_check.py PORT SECRET FAST_URL SLOW_URL MISSING_URL

Prints one JSON object: the answers and the notifications, for the Swift test to check.
"""
import asyncio
import json
import sys

import websockets

port, secret, fast_url, slow_url, missing_url = sys.argv[1:6]


async def main():
    received = []
    async with websockets.connect(f"ws://127.0.0.1:{port}/jsonrpc", max_size=1 << 20) as ws:

        async def reader():
            async for message in ws:
                received.append(json.loads(message))

        task = asyncio.create_task(reader())

        async def until(predicate, seconds=60):
            for _ in range(int(seconds * 20)):
                found = [m for m in received if predicate(m)]
                if found:
                    return found[0]
                await asyncio.sleep(0.05)
            return None

        async def call(ident, method, params):
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))
            return await until(lambda m: m.get("id") == ident)

        def notified(method, gid):
            return lambda m: m.get("method") == method and m.get("params") == [{"gid": gid}]

        token = "token:" + secret
        report = {}
        report["missing"] = await call("m", "aria2.getVersion", [])
        report["wrong"] = await call("w", "aria2.getVersion", ["token:wrong"])
        report["multicall"] = await call("mc", "system.multicall", [[
            {"methodName": "aria2.getVersion", "params": [token]},
            {"methodName": "aria2.getGlobalStat", "params": ["token:wrong"]},
        ]])
        fast = (await call("f", "aria2.addUri", [token, [fast_url]]))["result"]
        report["fast"] = fast
        report["fast start"] = await until(notified("aria2.onDownloadStart", fast)) is not None
        report["fast complete"] = await until(notified("aria2.onDownloadComplete", fast)) is not None
        slow = (await call("s", "aria2.addUri", [token, [slow_url]]))["result"]
        report["slow start"] = await until(notified("aria2.onDownloadStart", slow)) is not None
        await call("p", "aria2.pause", [token, slow])
        report["slow pause"] = await until(notified("aria2.onDownloadPause", slow)) is not None
        await call("r", "aria2.remove", [token, slow])
        report["slow stop"] = await until(notified("aria2.onDownloadStop", slow)) is not None
        missing = (await call("e", "aria2.addUri", [token, [missing_url]]))["result"]
        report["error"] = await until(notified("aria2.onDownloadError", missing)) is not None
        task.cancel()
    print(json.dumps(report), flush=True)


asyncio.run(main())
