"""`python -m agensh_ray.bootstrap`: prepare Gitea (and Mattermost) for a run.

    python -m agensh_ray.bootstrap --forge gitea --gitea-url http://localhost:3000 \\
        --admin-token-file gitea-admin.token --workers 8 --task textkit \\
        --intake-url http://host.docker.internal:8765/hooks/gitea \\
        [--mattermost-url http://localhost:8065 --mattermost-token-file mm-admin.token] \\
        --secrets-out run-secrets.json

What it creates, and how it stays idempotent: `agensh_ray.services.provision`.
Tokens go to the secrets file only (mode 0600) and are never printed.

This module is the CLI only (flags -> `ProvisionSettings` -> the provisioning
in `agensh_ray.services.provision`, its progress lines printed); exit codes:
0 done, 1 a refusal (printed as `error: ...`), 2 bad flags or an unknown task.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agensh_ray.errors import ChatError, ForgeError, ProvisionError, TaskError
from agensh_ray.services.provision import (
    GiteaSettings,
    MattermostSettings,
    ProvisionSettings,
    provision,
    read_secret_file,
)
from agensh_ray.task import Task


def say(text: str) -> None:
    print(text, flush=True)


def parse_args(argv: list[str] | None = None):
    p = argparse.ArgumentParser(prog="python -m agensh_ray.bootstrap", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--forge", default="gitea", choices=["gitea"], help="forge to prepare")
    p.add_argument("--gitea-url", required=True, help="Gitea base URL, e.g. http://localhost:3000")
    p.add_argument("--admin-token-file", type=Path, required=True, help="file holding a Gitea site-admin token")
    p.add_argument("--workers", type=int, required=True, help="number of workers (users w001..)")
    p.add_argument("--task", default="textkit", help="bundled task name or task directory (seeds the repo)")
    p.add_argument("--org", default="agensh", help="Gitea organization")
    p.add_argument("--repo", default="run", help="repository name")
    p.add_argument("--intake-url", default=None,
                   help="URL Gitea delivers webhooks to: the run's intake (host:port the run listens on)")
    p.add_argument("--mattermost-url", default=None, help="Mattermost base URL, e.g. http://localhost:8065")
    p.add_argument("--mattermost-token-file", type=Path, default=None, help="file holding a Mattermost admin token")
    p.add_argument("--team", default="agensh", help="Mattermost team name")
    p.add_argument("--channel", default="task", help="Mattermost task channel name")
    p.add_argument("--secrets-out", type=Path, required=True, help="where to write the tokens (mode 0600)")
    a = p.parse_args(argv)
    if a.mattermost_url and not a.mattermost_token_file:
        p.error("--mattermost-url needs --mattermost-token-file")
    if not 1 <= a.workers <= 1024:
        p.error("--workers must be between 1 and 1,024")
    return a


def settings_from(args) -> ProvisionSettings:
    """The flags as settings; the token files are read here (ProvisionError when one is empty)."""
    gitea = GiteaSettings(url=args.gitea_url, admin_token=read_secret_file(args.admin_token_file),
                          admin_token_from=f"the token in {args.admin_token_file}", org=args.org, repo=args.repo,
                          intake_url=args.intake_url)
    mattermost = None
    if args.mattermost_url:
        mattermost = MattermostSettings(url=args.mattermost_url,
                                        admin_token=read_secret_file(args.mattermost_token_file),
                                        team=args.team, channel=args.channel)
    return ProvisionSettings(workers=args.workers, gitea=gitea, mattermost=mattermost, secrets_out=args.secrets_out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        task = Task.load(args.task)
    except TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        provision(settings_from(args), task, say)
    except (ForgeError, ChatError, ProvisionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
