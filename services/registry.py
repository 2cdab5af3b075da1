"""Forge and chat implementations by name. A module is imported only when its
name is chosen; an unknown name gets the list of known ones.

`make_forge` / `make_chat` build the plain objects (the ForgeActor and
ChatActor build theirs here); `service_options` is what of the run config
they read. Creating the actors of a run is the actors layer's job
(agensh_ray.actors.services.make_services).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agensh_ray.errors import UnknownService

FORGES: dict[str, str] = {"embedded": "one machine: a bare repo over git smart-HTTP", "gitea": "a Gitea server"}
CHATS: dict[str, str] = {"embedded": "one machine: a chat actor with a JSONL log", "mattermost": "a Mattermost server"}


def check_name(kind: str, name: str) -> None:
    """UnknownService listing the known names unless `name` is a known `kind` ("forge" or "chat")."""
    known = FORGES if kind == "forge" else CHATS
    if name not in known:
        listed = "; ".join(f"{k} ({v})" for k, v in known.items())
        raise UnknownService(f"unknown {kind} {name!r}; known: {listed}")


def _need(options: dict, key: str, what: str) -> Any:
    value = options.get(key)
    if not value:
        raise UnknownService(f"{what} needs {key.replace('_', '-')} (see services/README.md)")
    return value


def make_forge(name: str, root: Path, options: dict | None = None):
    """The Forge for `name`, started. options: host (embedded: the address to listen on, default
    127.0.0.1), token_key (embedded: what its tokens are made from, see forge/embedded/tokens.py),
    secrets, gitea_url, intake_listen (gitea)."""
    check_name("forge", name)
    options = options or {}
    if name == "embedded":
        from agensh_ray.services.forge.embedded import EmbeddedForge

        forge = EmbeddedForge(Path(root), host=options.get("host") or "127.0.0.1", token_key=options.get("token_key"))
    else:
        from agensh_ray.services.forge.gitea import GiteaForge

        forge = GiteaForge.from_secrets(Path(_need(options, "secrets", "--forge gitea")), Path(root),
                                        url=options.get("gitea_url"), intake_listen=options.get("intake_listen"))
    forge.start()
    return forge


def make_chat(name: str, root: Path, options: dict | None = None):
    """The Chat for `name`, started. options: secrets, mattermost_url (mattermost)."""
    check_name("chat", name)
    options = options or {}
    if name == "embedded":
        from agensh_ray.services.chat.embedded import EmbeddedChat

        return EmbeddedChat(Path(root))
    from agensh_ray.services.chat.mattermost import MattermostChat

    chat = MattermostChat.from_secrets(Path(_need(options, "secrets", "--chat mattermost")), Path(root),
                                       url=options.get("mattermost_url"))
    chat.start()
    return chat


def service_options(cfg: Any) -> dict:
    """The options of the run config that the services read (JSON-able, no secrets in them)."""
    svc = getattr(cfg, "services", None)
    if svc is None:
        return {}
    return {k: (str(v) if v is not None else None) for k, v in svc.model_dump().items()}
