"""Forge and chat implementations by name. A module is imported only when its
name is chosen; an unknown name gets the list of known ones.

`make_forge` / `make_chat` build the plain objects (inside the ForgeActor /
ChatActor); `make_services` creates those actors for a run (the driver's one
call).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agensh_ray.errors import UnknownService

FORGES: dict[str, str] = {"embedded": "one machine: a bare repo over git smart-HTTP", "gitea": "a Gitea server"}
CHATS: dict[str, str] = {"embedded": "one machine: a chat actor with a JSONL log", "mattermost": "a Mattermost server"}


def _check(kind: str, name: str, known: dict[str, str]) -> None:
    if name not in known:
        listed = "; ".join(f"{k} ({v})" for k, v in known.items())
        raise UnknownService(f"unknown {kind} {name!r}; known: {listed}")


def _need(options: dict, key: str, what: str) -> Any:
    value = options.get(key)
    if not value:
        raise UnknownService(f"{what} needs {key.replace('_', '-')} (see services/README.md)")
    return value


def make_forge(name: str, root: Path, options: dict | None = None):
    """The Forge for `name`, started. options: secrets, gitea_url, intake_listen (gitea)."""
    _check("forge", name, FORGES)
    options = options or {}
    if name == "embedded":
        from agensh_ray.services.forge.embedded import EmbeddedForge

        # On a cluster the agents of other nodes clone and push here: listen on this node's address.
        host = "127.0.0.1"
        if options.get("cluster"):
            import ray

            host = ray.util.get_node_ip_address()
        forge = EmbeddedForge(Path(root), host=host)
    else:
        from agensh_ray.services.forge.gitea import GiteaForge

        forge = GiteaForge.from_secrets(Path(_need(options, "secrets", "--forge gitea")), Path(root),
                                        url=options.get("gitea_url"), intake_listen=options.get("intake_listen"))
    forge.start()
    return forge


def make_chat(name: str, root: Path, options: dict | None = None):
    """The Chat for `name`, started. options: secrets, mattermost_url (mattermost)."""
    _check("chat", name, CHATS)
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


def make_services(cfg: Any, run_dir: Path, run_id: str, scheduling_strategy: Any = None) -> tuple[Any, Any]:
    """(chat actor, forge actor) for a run, named chat-<run_id> and forge-<run_id>, placed by
    `scheduling_strategy` (the driver pins them to its own node; None: Ray's default)."""
    from agensh_ray.actors.chat import ChatActor
    from agensh_ray.actors.forge import ForgeActor

    _check("forge", cfg.forge, FORGES)
    _check("chat", cfg.chat, CHATS)
    opts = service_options(cfg)
    if getattr(cfg, "address", None):
        opts["cluster"] = "1"
    rd = str(run_dir)
    chat = ChatActor.options(name=f"chat-{run_id}", scheduling_strategy=scheduling_strategy).remote(
        str(Path(run_dir) / "chat"), rd, run_id, cfg.chat, opts)
    forge = ForgeActor.options(name=f"forge-{run_id}", scheduling_strategy=scheduling_strategy).remote(
        str(Path(run_dir) / "forge"), rd, run_id, cfg.forge, opts)
    return chat, forge


