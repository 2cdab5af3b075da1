"""Fakes of the production services, shipped in the package so that tests
(and anyone without Docker) can drive the real adapters: a fake Gitea
(REST + git smart-HTTP + signed webhooks) and a fake Mattermost (REST +
websocket), both contract-checked against the official API descriptions.

`FakeStack` starts both and runs the real bootstrap against them.
"""

from __future__ import annotations

import contextlib
import io
import socket
from dataclasses import dataclass, field
from pathlib import Path


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
    gitea: object = None
    mm: object = None
    intake_port: int = 0
    secrets: Path = field(default=None)
    bootstrap_output: str = ""

    def start(self) -> "FakeStack":
        from agensh_ray.services.fakes.gitea import FakeGitea
        from agensh_ray.services.fakes.mattermost import FakeMattermost

        self.root = Path(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.gitea = FakeGitea(self.root / "gitea").start()
        if self.mattermost:
            self.mm = FakeMattermost().start()
        self.intake_port = free_port()
        self.secrets = self.root / "secrets.json"
        self.bootstrap()
        return self

    def bootstrap_args(self) -> list[str]:
        (self.root / "gitea-admin.token").write_text(self.gitea.admin_token)
        args = ["--forge", "gitea", "--gitea-url", self.gitea.url,
                "--admin-token-file", str(self.root / "gitea-admin.token"), "--workers", str(self.workers),
                "--task", self.task, "--intake-url", f"http://127.0.0.1:{self.intake_port}/hooks/gitea",
                "--secrets-out", str(self.secrets)]
        if self.mm is not None:
            (self.root / "mm-admin.token").write_text(self.mm.admin_token)
            args += ["--mattermost-url", self.mm.url, "--mattermost-token-file", str(self.root / "mm-admin.token")]
        return args

    def bootstrap(self) -> int:
        from agensh_ray import bootstrap

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = bootstrap.main(self.bootstrap_args())
        self.bootstrap_output += out.getvalue()
        if rc != 0:
            raise RuntimeError(f"bootstrap failed ({rc}):\n{out.getvalue()}")
        return rc

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

    def __enter__(self) -> "FakeStack":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
