"""Fakes of the production services, shipped in the package so that tests
(and anyone without Docker) can drive the real adapters: a fake Gitea
(REST + git smart-HTTP + signed webhooks) and a fake Mattermost (REST +
websocket), both contract-checked against the official API descriptions.

`FakeStack` starts both and provisions them for a run with the real
provisioning (`agensh_ray.services.provision`, what `python -m
agensh_ray.bootstrap` runs).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from agensh_ray.errors import ChatError, ForgeError, ProvisionError
from agensh_ray.services.fakes.gitea import FakeGitea
from agensh_ray.services.fakes.mattermost import FakeMattermost
from agensh_ray.services.provision import GiteaSettings, MattermostSettings, ProvisionSettings, provision
from agensh_ray.task import Task


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class FakeStack:
    """Fake Gitea + fake Mattermost, bootstrapped for `workers` workers (secrets in `secrets`)."""

    root: Path
    workers: int = 3
    task: str = "textkit"
    mattermost: bool = True
    gitea: FakeGitea | None = None
    mm: FakeMattermost | None = None
    intake_port: int = 0
    secrets: Path = field(default=None)
    bootstrap_output: str = ""

    def start(self) -> Self:
        self.root = Path(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.gitea = FakeGitea(self.root / "gitea").start()
        if self.mattermost:
            self.mm = FakeMattermost().start()
        self.intake_port = free_port()
        self.secrets = self.root / "secrets.json"
        self.bootstrap()
        return self

    @property
    def intake_url(self) -> str:
        return f"http://127.0.0.1:{self.intake_port}/hooks/gitea"

    def settings(self) -> ProvisionSettings:
        """What the CLI would pass for this stack."""
        mattermost = None
        if self.mm is not None:
            mattermost = MattermostSettings(url=self.mm.url, admin_token=self.mm.admin_token)
        return ProvisionSettings(
            workers=self.workers, secrets_out=self.secrets, mattermost=mattermost,
            gitea=GiteaSettings(url=self.gitea.url, admin_token=self.gitea.admin_token, intake_url=self.intake_url),
        )

    def bootstrap(self) -> int:
        """Provision (again: it is idempotent); its progress lines are added to `bootstrap_output`."""
        lines: list[str] = []
        try:
            provision(self.settings(), Task.load(self.task), say=lines.append)
        except (ForgeError, ChatError, ProvisionError) as exc:
            raise RuntimeError(f"bootstrap failed ({exc}):\n" + "\n".join(lines)) from exc
        finally:
            self.bootstrap_output += "".join(f"{line}\n" for line in lines)
        return 0

    def bootstrap_args(self) -> list[str]:
        """The same provisioning as `python -m agensh_ray.bootstrap` flags (the admin tokens in files beside)."""
        (self.root / "gitea-admin.token").write_text(self.gitea.admin_token)
        args = ["--forge", "gitea", "--gitea-url", self.gitea.url,
                "--admin-token-file", str(self.root / "gitea-admin.token"), "--workers", str(self.workers),
                "--task", self.task, "--intake-url", self.intake_url, "--secrets-out", str(self.secrets)]
        if self.mm is not None:
            (self.root / "mm-admin.token").write_text(self.mm.admin_token)
            args += ["--mattermost-url", self.mm.url, "--mattermost-token-file", str(self.root / "mm-admin.token")]
        return args

    @property
    def intake_listen(self) -> str:
        return f"127.0.0.1:{self.intake_port}"

    @property
    def violations(self) -> list:
        return [*(self.gitea.violations if self.gitea else []), *(self.mm.violations if self.mm else [])]

    def close(self) -> None:
        for s in (self.gitea, self.mm):
            if s is not None:
                s.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
