"""A job's state files, addressed by location: a local path or an S3 URI (``s3://bucket/key``).

A streaming query keeps a few small files beside Spark's checkpoint (jobs/streaming/state.py);
through this module they live wherever ``lake.checkpoint_root`` points, so a driver on another
host finds them:

- local paths (and ``file://``): a write goes to a temporary file in the same folder, is
  fsynced and renamed over the target (a crash leaves the old file or the new one); a create
  links the written temporary file to the target, which fails if the target exists;
- ``s3://``, ``s3a://``, ``s3n://`` (Spark's schemes for S3, one bucket/key layout): boto3. A PUT
  replaces an object atomically; a create is a conditional PUT (``If-None-Match: *``), so
  "first writer wins" holds across hosts. Region, credentials and endpoint come from boto3's own
  chain (``AWS_ENDPOINT_URL_S3`` points it at another S3 API, as the tests do).

:func:`read` raises FileNotFoundError for a missing file on both, so callers handle one error.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.errors import ConfigError, KappaError

S3_SCHEMES = ("s3", "s3a", "s3n")
CONFLICT_RETRIES = 5
"""Conditional PUTs retried after S3's 409 ConditionalRequestConflict (a racing PUT in flight)."""


class StateStoreError(KappaError):
    """The object store refused or failed a state file operation; the message names the fix."""


@dataclass(frozen=True)
class ObjectPath:
    """An object-store location: the part of ``pathlib`` the job's state paths use."""

    scheme: str
    bucket: str
    key: str
    """No leading or trailing slash; empty for the bucket itself."""

    @classmethod
    def parse(cls, uri: str) -> ObjectPath:
        """``s3://bucket/a/b`` as an ObjectPath."""
        scheme, _, rest = uri.partition("://")
        bucket, _, key = rest.partition("/")
        if not bucket:
            raise ConfigError(f"location {uri!r} names no bucket; expected {scheme}://<bucket>/<prefix>")
        return cls(scheme, bucket, "/".join(part for part in key.split("/") if part))

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}" if self.key else f"{self.scheme}://{self.bucket}"

    def __truediv__(self, name: str) -> ObjectPath:
        return ObjectPath(self.scheme, self.bucket, f"{self.key}/{name}".strip("/"))

    @property
    def name(self) -> str:
        """The last part of the key."""
        return self.key.rpartition("/")[2]

    @property
    def parent(self) -> ObjectPath:
        """The location one level up."""
        return ObjectPath(self.scheme, self.bucket, self.key.rpartition("/")[0])

    def with_name(self, name: str) -> ObjectPath:
        """The sibling called ``name``."""
        return self.parent / name


Location = Path | ObjectPath
"""Where a state file or folder lives."""


def location(text: str | Location) -> Location:
    """A local Path, or an ObjectPath for an S3 URI; other schemes are refused naming the choices."""
    if isinstance(text, Path | ObjectPath):
        return text
    if text.startswith("file://") or "://" not in text:
        return Path(text.removeprefix("file://"))
    scheme = text.partition("://")[0].lower()
    if scheme not in S3_SCHEMES:
        raise ConfigError(f"location {text!r}: job state lives on a local path or on S3 (s3://, s3a://), "
                          f"not {scheme}://; set lake.checkpoint_root to one of those")
    return ObjectPath.parse(text)


def read(path: Location) -> bytes:
    """The file's bytes; FileNotFoundError when there is none."""
    if isinstance(path, Path):
        return path.read_bytes()
    return _object(path, "get_object")["Body"].read()


def modified(path: Location) -> float:
    """When the file was last written (epoch seconds); FileNotFoundError when there is none."""
    if isinstance(path, Path):
        return path.stat().st_mtime
    return _object(path, "head_object")["LastModified"].timestamp()


def _object(path: ObjectPath, call: str) -> dict[str, Any]:
    """A GetObject or HeadObject answer; FileNotFoundError when there is no such object."""
    try:
        return getattr(_s3(), call)(Bucket=path.bucket, Key=path.key)
    except _aws_errors() as exc:
        if _code(exc) in ("NoSuchKey", "404"):
            raise FileNotFoundError(errno.ENOENT, "no such object", str(path)) from None
        raise _failed("read", path, "s3:GetObject", exc) from exc


def write(path: Location, data: bytes) -> None:
    """Replace the file with ``data`` atomically (a reader sees the old or the new file whole)."""
    if isinstance(path, Path):
        tmp = _written_temp(path, data)
        os.replace(tmp, path)
        return
    try:
        _s3().put_object(Bucket=path.bucket, Key=path.key, Body=data)
    except _aws_errors() as exc:
        raise _failed("write", path, "s3:PutObject", exc) from exc


def create(path: Location, data: bytes) -> bool:
    """Write the file only if there is none: True if this call created it (first writer wins)."""
    if isinstance(path, Path):
        tmp = _written_temp(path, data)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
    for attempt in range(CONFLICT_RETRIES):
        try:
            _s3().put_object(Bucket=path.bucket, Key=path.key, Body=data, IfNoneMatch="*")
            return True
        except _aws_errors() as exc:
            code = _code(exc)
            if code in ("PreconditionFailed", "412"):
                return False
            if code not in ("ConditionalRequestConflict", "409") or attempt == CONFLICT_RETRIES - 1:
                raise _failed("create", path, "s3:PutObject", exc) from exc
            time.sleep(0.05 * (attempt + 1))
    return False


def listdir(path: Location) -> list[str]:
    """The names of the files and folders directly in ``path``, sorted (empty when there is none)."""
    if isinstance(path, Path):
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []
    prefix = f"{path.key}/" if path.key else ""
    names: set[str] = set()
    try:
        pages = _s3().get_paginator("list_objects_v2").paginate(Bucket=path.bucket, Prefix=prefix,
                                                                 Delimiter="/")
        for page in pages:
            names.update(item["Key"][len(prefix):] for item in page.get("Contents", []))
            names.update(item["Prefix"][len(prefix):].rstrip("/") for item in page.get("CommonPrefixes", []))
    except _aws_errors() as exc:
        raise _failed("list", path, "s3:ListBucket", exc) from exc
    names.discard("")   # a folder marker object ("<prefix>/")
    return sorted(names)


def delete(path: Location) -> None:
    """Delete the file (nothing to do when there is none)."""
    if isinstance(path, Path):
        path.unlink(missing_ok=True)
        return
    try:
        _s3().delete_object(Bucket=path.bucket, Key=path.key)
    except _aws_errors() as exc:
        raise _failed("delete", path, "s3:DeleteObject", exc) from exc


def delete_tree(path: Location) -> None:
    """Delete a folder and everything below it (nothing to do when there is none)."""
    if isinstance(path, Path):
        shutil.rmtree(path, ignore_errors=True)
        return
    for batch in _chunks(_keys_below(path), 1000):
        try:
            answer = _s3().delete_objects(Bucket=path.bucket, Delete={"Objects": [{"Key": k} for k in batch],
                                                                       "Quiet": True})
        except _aws_errors() as exc:
            raise _failed("delete", path, "s3:DeleteObject", exc) from exc
        if answer.get("Errors"):
            first = answer["Errors"][0]
            raise StateStoreError(f"cannot delete {path.scheme}://{path.bucket}/{first.get('Key')}: "
                                  f"{first.get('Code')} ({first.get('Message')}); "
                                  f"{len(answer['Errors'])} object(s) kept; the job's role needs "
                                  "s3:DeleteObject on them")


def move_tree(source: Location, target: Location) -> None:
    """Move a folder and everything below it (on S3: copy every object, then delete the source)."""
    if isinstance(source, Path) and isinstance(target, Path):
        shutil.move(str(source), str(target))
        return
    if not (isinstance(source, ObjectPath) and isinstance(target, ObjectPath)):
        raise ConfigError(f"cannot move {source} to {target}: both must be local or both on S3")
    keys = _keys_below(source)
    for key in keys:
        name = key[len(source.key):].lstrip("/")
        try:
            _s3().copy_object(Bucket=target.bucket, Key=(target / name).key,
                              CopySource={"Bucket": source.bucket, "Key": key})
        except _aws_errors() as exc:
            raise _failed("copy", source / name, "s3:GetObject and s3:PutObject", exc) from exc
    delete_tree(source)


def _keys_below(path: ObjectPath) -> list[str]:
    if not path.key:
        raise ConfigError(f"refusing to treat the whole bucket {path} as one folder; use a prefix")
    keys: list[str] = []
    try:
        pages = _s3().get_paginator("list_objects_v2").paginate(Bucket=path.bucket, Prefix=f"{path.key}/")
        for page in pages:
            keys.extend(item["Key"] for item in page.get("Contents", []))
    except _aws_errors() as exc:
        raise _failed("list", path, "s3:ListBucket", exc) from exc
    return keys


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _written_temp(path: Path, data: bytes) -> str:
    """A temporary file beside ``path`` holding ``data``, flushed to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(handle, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    return tmp


_clients: dict[tuple[str | None, str | None], Any] = {}
_clients_lock = threading.Lock()


def _s3() -> Any:
    """This process's S3 client (one per endpoint setting; boto3 clients are thread safe)."""
    import boto3

    endpoint = (os.environ.get("AWS_ENDPOINT_URL_S3"), os.environ.get("AWS_ENDPOINT_URL"))
    with _clients_lock:
        if endpoint not in _clients:
            _clients[endpoint] = boto3.session.Session().client("s3")
        return _clients[endpoint]


def _aws_errors() -> tuple[type[Exception], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError)


def _code(exc: Exception) -> str | None:
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code")) if isinstance(response, dict) else None


def _failed(action: str, path: Location, permission: str, exc: Exception) -> StateStoreError:
    code = _code(exc)
    if code == "NoSuchBucket":
        hint = "the bucket does not exist; create it or fix lake.checkpoint_root"
    elif code in ("AccessDenied", "403"):
        hint = f"the job's role needs {permission} on it"
    else:
        hint = "check the endpoint, the network and the credentials (boto3's chain)"
    return StateStoreError(f"cannot {action} {path}: {code or type(exc).__name__} ({exc}); {hint}")
