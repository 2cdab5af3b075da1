"""A run on an object store, for `Run` (mixed in): the driver's side of `--run-dir s3://...`.

The driver writes the run into its local staging copy (agensh_ray/storage.py) like any run folder; its
mirror ships what the driver itself writes (config.json, summary.json, checkpoints, the reaper's log) every
2 s, each actor's mirror ships its own part (agensh_ray/mirror.py), and at the end, once the actors have
closed (each flushing its own mirror), the driver ships whatever of the staging copy the store still lacks
(everything but the workers' clones and the execute-only reference), waiting for an unreachable store up to
`FINAL_SHIP_S`; the summary says what was shipped and what was not. Expects `Run`'s attributes.
"""

from __future__ import annotations

from pathlib import Path

from agensh_ray import mirror, runfolder, storage

FINAL_SHIP_S = 120.0
"""How long the end of a run waits for an unreachable store before it reports what was not shipped."""
DRIVER_OWNS = ("config.json", "summary.json", "driver.json", ".gitignore", "checkpoints/**/*", "logs/reaper.log")


class Shipping:
    def _locate(self) -> Path:
        """The run folder this process writes: the local one, or the staging copy of an object-store run
        (`self.run_uri` its URI, else None)."""
        self.run_uri = None
        if storage.is_uri(self.cfg.run_dir):
            self.run_uri = storage.StoreURI.parse(str(self.cfg.run_dir)).child(self.run_id).uri
            return (storage.staging_parent(str(self.cfg.run_dir)) / self.run_id).resolve()
        return (Path(self.cfg.run_dir) / self.run_id).resolve()

    def _prepare_folder(self) -> None:
        if not self.cfg.resume:  # a resumed run goes on in its folder (driver/resume.py checks it)
            runfolder.prepare_target(self.cfg.run_dir, self.run_id, self.cfg.overwrite)
        self.mirror = mirror.attach(self.run_dir, *DRIVER_OWNS) if self.run_uri else None
        if self.mirror is not None:  # the driver says an outage on its stderr even while it has nothing to ship
            self.mirror.probe_every_s = 5.0

    @property
    def where(self) -> str:
        return self.run_uri or str(self.run_dir)

    def _ship_final(self, summary: dict | None, within: float = FINAL_SHIP_S) -> None:
        """Ship what the store still lacks (bounded by `within`); the figures go into `summary`."""
        if not self.run_uri:
            return
        self.say(f"shipping the run folder to {self.run_uri} (at most {within:.0f} s)")
        rep = self.mirror.flush(within, everything=True)
        if summary is not None:
            summary["run_dir"] = self.run_uri
            summary["staging_dir"] = str(self.run_dir)
            summary["storage"] = {
                "uri": self.run_uri, "files_shipped_at_end": rep.shipped_files,
                "mib_shipped_by_driver": round(rep.shipped_bytes / 2**20, 2), "pending": rep.pending,
                "outages": rep.outages, "outage_s": round(rep.outage_s, 1), "error": rep.error,
            }

    def _ship_summary(self) -> None:
        """summary.json (written after `_ship_final`) shipped too; a store that fails now is said plainly."""
        if not self.run_uri:
            return
        rep = mirror.flush(self.run_dir, timeout_s=30.0)
        if rep is not None and rep.pending:
            print(f"warning: {rep.pending} files of {self.run_dir} could not be shipped to {self.run_uri} "
                  f"({rep.error}); they are in that local staging copy", file=self.out, flush=True)
        mirror.close_all(timeout_s=5.0)
