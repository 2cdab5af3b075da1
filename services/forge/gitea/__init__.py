"""The Forge protocol on a Gitea server: `adapter.py` (GiteaForge, the
protocol's calls), `client.py` (the REST client, shared with provisioning),
`conflicts.py` (which files conflict, by git on a mirror), `webhooks.py`
(webhooks -> the durable forge event log), `intake.py` (the signed-webhook
HTTP endpoint)."""

from __future__ import annotations

from agensh_ray.services.forge.gitea.adapter import GiteaForge
from agensh_ray.services.forge.gitea.client import GiteaClient
from agensh_ray.services.forge.gitea.intake import WebhookIntake, signature
from agensh_ray.services.forge.gitea.webhooks import ForgeEventLog, GiteaWebhookMapper

__all__ = ["ForgeEventLog", "GiteaClient", "GiteaForge", "GiteaWebhookMapper", "WebhookIntake", "signature"]
