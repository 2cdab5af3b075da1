"""Run folders on an object store: `--run-dir s3://bucket/prefix` (pyarrow.fs, no S3 client of our own).

A run on an object store is written exactly as a local one, into a local *staging* copy of its run
folder (appends, fsyncs and atomic renames stay local), and each process that writes part of it ships
what it wrote to the store with a bounded lag (agensh_ray/mirror.py). This module holds the rest:

- the URI: `s3://bucket/prefix[?endpoint=http://host:port&region=...]`; without `endpoint`, the
  standard settings `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` and `AWS_REGION` / `AWS_DEFAULT_REGION`;
  credentials from the AWS SDK's usual chain (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
  `AWS_SESSION_TOKEN`, profiles);
- where the staging copy is: `$AGENSH_STAGING_DIR` (default `~/.cache/agensh-ray/staging`) /
  `<the --run-dir URI, quoted into one folder name>` / `<run_id>`. The mapping goes both ways, so any
  process on any node that is handed the staging path knows the URI it ships to (`run_uri_of`);
- the checks made before Ray starts (`check`), the restore of a subfolder into a staging copy that
  lacks it (an actor restarted on another node reloads its durable log from the store), and the
  download of a run folder for analysis (`fetch_run`).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from agensh_ray.errors import RunFolderError

SCHEMES = ("s3",)
OPTIONS = ("endpoint", "region")
"""The query parameters a URI may carry."""
NOT_SHIPPED = ("workers", "reference")
"""Top-level folders of a run folder that stay local: each worker's clone and sealed HOME (node state,
rebuilt from the forge), and the execute-only reference (nobody may read its bytes)."""


def is_uri(run_dir: object) -> bool:
    """Whether a `--run-dir` names an object store (a `scheme://...` string) rather than a local folder."""
    return isinstance(run_dir, str) and "://" in run_dir


@dataclass(frozen=True)
class StoreURI:
    """A parsed object-store location: `bucket` and `key` (no leading or trailing slash)."""

    uri: str
    bucket: str
    key: str
    endpoint: str | None = None
    region: str | None = None
    query: str = field(default="", compare=False)

    @classmethod
    def parse(cls, uri: str) -> StoreURI:
        parts = urlsplit(uri)
        if parts.scheme not in SCHEMES:
            raise RunFolderError(f"--run-dir {uri}: unsupported object store {parts.scheme!r}: use a local folder "
                                 f"or s3://bucket/prefix")
        if not parts.netloc or "@" in parts.netloc or ":" in parts.netloc:
            raise RunFolderError(f"--run-dir {uri}: no bucket name (s3://bucket/prefix; credentials go in "
                                 "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, never in the URI)")
        opts = dict(parse_qsl(parts.query, keep_blank_values=True))
        if unknown := sorted(set(opts) - set(OPTIONS)):
            raise RunFolderError(f"--run-dir {uri}: unknown option(s) {', '.join(unknown)} (known: {', '.join(OPTIONS)})")
        key = parts.path.strip("/")
        if any(p in ("", ".", "..") for p in key.split("/")) and key:
            raise RunFolderError(f"--run-dir {uri}: the prefix has an empty, '.' or '..' part")
        endpoint = opts.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint and urlsplit(endpoint).scheme not in ("http", "https"):
            raise RunFolderError(f"--run-dir {uri}: endpoint {endpoint!r} is not an http:// or https:// URL")
        region = opts.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        base = f"{parts.scheme}://{parts.netloc}" + (f"/{key}" if key else "")
        return cls(base + (f"?{parts.query}" if parts.query else ""), parts.netloc, key, endpoint, region,
                   parts.query)

    def child(self, name: str) -> StoreURI:
        """The location `name` below this one (the run folder under --run-dir)."""
        key = f"{self.key}/{name}" if self.key else name
        base = f"s3://{self.bucket}/{key}"
        return StoreURI(base + (f"?{self.query}" if self.query else ""), self.bucket, key, self.endpoint,
                        self.region, self.query)

    @property
    def path(self) -> str:
        """The location as a pyarrow filesystem path (`bucket/key`)."""
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    @property
    def where(self) -> str:
        return f"{self.uri.split('?')[0]} at {self.endpoint or 'AWS'}"

    def filesystem(self, connect_timeout: float = 2.0, request_timeout: float = 10.0, attempts: int = 2):
        """A pyarrow S3FileSystem for this location: short timeouts and few retries, so an unreachable
        store is reported in seconds (the mirror retries on its own schedule)."""
        from pyarrow import fs

        kw: dict = {"region": self.region or "us-east-1", "connect_timeout": connect_timeout,
                    "request_timeout": request_timeout,
                    "retry_strategy": fs.AwsStandardS3RetryStrategy(max_attempts=attempts)}
        if self.endpoint:
            ep = urlsplit(self.endpoint)
            kw.update(endpoint_override=ep.netloc, scheme=ep.scheme)
        return fs.S3FileSystem(**kw)


# -- the staging copy -----------------------------------------------------------------------------------------

def staging_root() -> Path:
    return Path(os.environ.get("AGENSH_STAGING_DIR") or "~/.cache/agensh-ray/staging").expanduser().resolve()


def staging_parent(run_dir_uri: str) -> Path:
    """The local folder that holds the staging copies of the run folders under `run_dir_uri`."""
    return staging_root() / quote(StoreURI.parse(run_dir_uri).uri, safe="")


def run_uri_of(path: str | os.PathLike) -> tuple[Path, StoreURI] | None:
    """(the staged run folder, its URI) if `path` lies in a staging copy, else None (a local run)."""
    root = staging_root()
    p = Path(path).resolve()
    if not p.is_relative_to(root) or len(p.relative_to(root).parts) < 2:
        return None
    base, run_id = p.relative_to(root).parts[:2]
    return root / base / run_id, StoreURI.parse(unquote(base)).child(run_id)


# -- before Ray starts ----------------------------------------------------------------------------------------

def check(run_dir_uri: str, run_id: str | None, overwrite: bool) -> StoreURI:
    """The parsed URI, the bucket reachable and writable with these settings, and (with a run id) no earlier
    run's folder there unless `overwrite`; RunFolderError says why not, naming the endpoint."""
    from pyarrow import fs as pafs

    loc = StoreURI.parse(run_dir_uri)
    store = loc.filesystem(connect_timeout=2.0, request_timeout=5.0, attempts=1)
    try:
        if store.get_file_info(loc.bucket).type == pafs.FileType.NotFound:
            raise RunFolderError(f"--run-dir {loc.where}: bucket {loc.bucket!r} does not exist")
        probe = f"{loc.path}/.agensh-probe-{secrets.token_hex(4)}"
        with store.open_output_stream(probe) as f:
            f.write(b"probe")
        store.delete_file(probe)
        if run_id is not None and not overwrite:
            if store.get_file_info(f"{loc.child(run_id).path}/config.json").type == pafs.FileType.File:
                raise RunFolderError(
                    f"run folder {loc.child(run_id).uri} holds an earlier run (its config.json): choose another "
                    "--run-id, or pass --overwrite to remove its contents first (resuming a run is not supported yet)")
    except OSError as exc:
        raise RunFolderError(f"--run-dir {loc.where}: the object store cannot be used: {_short(exc)} (endpoint: "
                             "?endpoint= or AWS_ENDPOINT_URL; credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"
                             ) from None
    return loc


def empty_remote(loc: StoreURI) -> None:
    """Remove an earlier run's objects under `loc` (--overwrite), so nothing of it is restored later."""
    from pyarrow import fs as pafs

    store = loc.filesystem()
    if store.get_file_info(loc.path).type != pafs.FileType.NotFound:
        store.delete_dir_contents(loc.path, missing_dir_ok=True)


# -- from the store into a local folder -----------------------------------------------------------------------

def download(loc: StoreURI, local: Path, store=None, exclude: tuple[str, ...] = ()) -> int:
    """Make `local` hold what `loc` holds (files missing or of another size downloaded, files gone from the
    store removed); top-level folders in `exclude` are left alone. The number of files downloaded."""
    from pyarrow import fs as pafs

    store = store or loc.filesystem()
    try:
        infos = store.get_file_info(pafs.FileSelector(loc.path, recursive=True, allow_not_found=True))
    except OSError as exc:
        raise RunFolderError(f"{loc.where}: cannot list the run folder: {_short(exc)}") from None
    remote = {i.path[len(loc.path) + 1:]: i for i in infos if i.type == pafs.FileType.File}
    remote = {rel: i for rel, i in remote.items() if rel.split("/")[0] not in exclude}
    n = 0
    for rel, info in sorted(remote.items()):
        target = local / rel
        if target.is_file() and target.stat().st_size == info.size:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.part")
        with store.open_input_stream(info.path) as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        tmp.replace(target)
        n += 1
    if local.is_dir():
        for f in local.rglob("*"):
            rel = f.relative_to(local).as_posix()
            if f.is_file() and rel not in remote and rel.split("/")[0] not in exclude:
                f.unlink()
    return n


def restore(path: str | os.PathLike) -> int:
    """A folder of a staged run folder (the board's, the chat's, the forge's) that is missing here is
    fetched from the store: an actor restarted on a node without the staging copy reloads its durable
    state. A local run, or a folder already here: nothing to do (0). The number of files fetched."""
    found = run_uri_of(path)
    p = Path(path).resolve()
    if found is None or p.exists():
        return 0
    run_dir, loc = found
    rel = p.relative_to(run_dir).as_posix()
    return download(loc.child(rel), p)


def fetch_run(run: str | os.PathLike) -> Path:
    """A run folder to read: a local path as it is, an `s3://...` run folder downloaded (changed files only)
    into `$AGENSH_CACHE_DIR` (default `~/.cache/agensh-ray/runs`), without its workers' clones."""
    if not is_uri(str(run)):
        return Path(run)
    loc = StoreURI.parse(str(run))
    cache = Path(os.environ.get("AGENSH_CACHE_DIR") or "~/.cache/agensh-ray/runs").expanduser()
    parent, _, run_id = loc.uri.split("?")[0].rstrip("/").rpartition("/")
    local = cache / quote(parent + (f"?{loc.query}" if loc.query else ""), safe="") / run_id
    store = loc.filesystem()
    from pyarrow import fs as pafs

    try:
        if store.get_file_info(f"{loc.path}/config.json").type != pafs.FileType.File:
            raise RunFolderError(f"{loc.where} is not a run folder: it has no config.json")
    except OSError as exc:
        raise RunFolderError(f"{loc.where}: the object store cannot be read: {_short(exc)}") from None
    local.mkdir(parents=True, exist_ok=True)
    download(loc, local, store, exclude=NOT_SHIPPED)
    return local


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) < 300 else text[:297] + "..."
