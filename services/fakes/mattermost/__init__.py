"""A fake Mattermost (REST API v4 and the v4 websocket) on loopback, for
tests of the Mattermost chat adapter and the provisioning. No Mattermost can
run here.

What it stands in for: users (created by an admin), personal access tokens
(`Authorization: Bearer`), teams, open channels, direct channels (named
`<id>__<id>`, ids sorted, one per pair), channel and team membership,
posts, `GET /channels/{id}/posts?since=` and the channels of a user in a
team (DMs included). Posting needs channel membership, as in Mattermost.
Every request and response body is checked against the official OpenAPI
file (`agensh_ray.services.fakes.contract`).

The websocket follows Mattermost's protocol: the client sends an
`authentication_challenge` with its token and gets `{"status": "OK",
"seq_reply": 1}`, then a `hello` event, then `posted` events (the post as a
JSON string in `data.post`, as Mattermost sends it) for the channels it is a
member of, each with an increasing `seq`. `drop_websockets()` closes every
socket server-side, to test reconnects.

Not modelled: sessions and passwords for login, roles and permissions
beyond admin/member, threads, reactions, files, rate limits.

Put together as the fake Gitea is (see its package docstring): one state
(`server.MattermostServer`), the REST resources (`rest.py`) and the
websocket (`websocket.py`) as mixins of `FakeMattermost`; a post made over
REST is broadcast on the websockets in the same step.
"""

from __future__ import annotations

from agensh_ray.services.fakes.mattermost.rest import RestApi
from agensh_ray.services.fakes.mattermost.server import AppError, MattermostServer
from agensh_ray.services.fakes.mattermost.websocket import WebsocketApi

__all__ = ["AppError", "FakeMattermost"]


class FakeMattermost(RestApi, WebsocketApi, MattermostServer):
    """The fake Mattermost. Start with `start()`; `url`, `admin_token`, `violations`, `posts`,
    `requests` for the tests; `drop_websockets()`, `socket_count()`, `websockets_flushed()`."""
