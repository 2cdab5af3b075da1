"""The fake Mattermost's websocket (`/api/v4/websocket`), following
Mattermost's protocol: the client sends an `authentication_challenge` with
its token and gets `{"status": "OK", "seq_reply": 1}`, then a `hello` event,
then `posted` events (the post as a JSON string in `data.post`, as
Mattermost sends it) for the channels it is a member of, each with an
increasing `seq`. `drop_websockets()` closes every socket server-side, to
test reconnects; `websockets_flushed()` tells a test that every event queued
for an open socket has been written to it.
"""

from __future__ import annotations

import asyncio
import json

from agensh_ray.services.fakes.mattermost.server import VERSION


class WebsocketApi:
    """Broadcast of `posted` events to the sockets of a channel's members; one task per socket."""

    def drop_websockets(self) -> None:
        """Close every websocket from the server side (a restart, a proxy timeout)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._close_sockets)

    def _close_sockets(self) -> None:
        for _, _, q in list(self._sockets.values()):
            q.put_nowait(None)

    def socket_count(self) -> int:
        return len(self._sockets)

    def websockets_flushed(self) -> bool:
        """True when every event queued for an open socket has been written to it (a socket that closed
        takes its unsent events with it). A post's events are queued before its REST answer leaves."""
        return not any(list(self._unsent.values()))

    def _broadcast(self, c: dict, p: dict) -> None:
        sender = self.users[p["user_id"]]
        data = {"channel_display_name": c["display_name"] or f"@{sender['username']}", "channel_name": c["name"],
                "channel_type": c["type"], "post": json.dumps(p), "sender_name": f"@{sender['username']}",
                "set_online": True, "team_id": c["team_id"]}
        if self.contract:
            self.contract.check_definition("#/components/schemas/Post", p, "websocket posted.data.post")
        event = {"event": "posted", "data": data,
                 "broadcast": {"omit_users": None, "user_id": "", "channel_id": c["id"], "team_id": ""}}
        members = self.channel_members[c["id"]]
        for key, (uid, _, q) in list(self._sockets.items()):
            if uid in members:
                q.put_nowait(event)
                self._unsent[key] = self._unsent.get(key, 0) + 1

    async def _websocket(self, ws) -> None:
        await ws.accept()
        try:
            first = json.loads(await asyncio.wait_for(ws.receive_text(), timeout=10))
        except Exception:
            await ws.close(code=1008)
            return
        token = (first.get("data") or {}).get("token", "")
        uid = self.tokens.get(token) if first.get("action") == "authentication_challenge" else None
        if uid is None:
            await ws.send_text(json.dumps({"status": "FAIL", "seq_reply": first.get("seq"),
                                           "error": {"id": "api.web_socket_router.not_authenticated.app_error"}}))
            await ws.close(code=1008)
            return
        q: asyncio.Queue = asyncio.Queue()
        key = id(ws)
        self._sockets[key] = (uid, ws, q)
        self._unsent[key] = 0
        seq = 0
        try:
            await ws.send_text(json.dumps({"status": "OK", "seq_reply": first.get("seq")}))
            await ws.send_text(json.dumps({"event": "hello", "data": {"server_version": VERSION},
                                           "broadcast": {"omit_users": None, "user_id": uid, "channel_id": "",
                                                         "team_id": ""}, "seq": seq}))
            reader = asyncio.create_task(self._drain(ws))
            while True:
                getter = asyncio.create_task(q.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if reader in done:
                    getter.cancel()
                    break
                event = getter.result()
                if event is None:
                    reader.cancel()
                    await ws.close(code=1001)
                    break
                seq += 1
                await ws.send_text(json.dumps({**event, "seq": seq}))
                self._unsent[key] -= 1
        except Exception:
            pass
        finally:
            self._sockets.pop(key, None)
            self._unsent.pop(key, None)

    @staticmethod
    async def _drain(ws) -> None:
        """Read (and ignore) what the client sends, until it disconnects."""
        try:
            while True:
                await ws.receive_text()
        except Exception:
            return
