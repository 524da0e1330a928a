"""Where the lake's tables live: a local path or S3, and how delta-rs and pyarrow reach them.

``storage_options`` turns ``lake.s3`` into delta-rs storage options (every function of
jobs/lake/delta.py takes them as ``storage``); ``filesystem`` gives the executors the same
location as a pyarrow filesystem (docs/deploy.md "The lake on S3").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.config.models import LakeConfig

Storage = Mapping[str, str]
S3_SCHEMES = ("s3://", "s3a://")


def storage_options(lake: LakeConfig) -> dict[str, str]:
    """delta-rs storage options of the lake's tables (none for a local lake).

    On S3: commits by conditional put (``conditional_put=etag``, no locking provider), plus the
    endpoint, region and plain-HTTP switch of ``lake.s3``. Credentials are never among them:
    delta-rs and pyarrow read them from the AWS environment, profile or instance role.
    """
    if not on_s3(lake.root):
        return {}
    options = {"conditional_put": "etag"}
    if lake.s3.endpoint_url:
        options["aws_endpoint_url"] = lake.s3.endpoint_url
    if lake.s3.region:
        options["aws_region"] = lake.s3.region
    if lake.s3.allow_http:
        options["aws_allow_http"] = "true"
    return options


def on_s3(uri: str) -> bool:
    """Whether ``uri`` names an S3 location."""
    return uri.startswith(S3_SCHEMES)


def filesystem(uri: str, storage: Storage | None = None) -> tuple[Any, str]:
    """The pyarrow filesystem of a table URI and the table's root path in it.

    Executors read and write data files through it (jobs/loader/files.py, merge.py); on S3 it
    uses ``storage``'s endpoint and region and the AWS credential chain, as delta-rs does.
    """
    import pyarrow.fs as pafs

    if not on_s3(uri):
        return pafs.FileSystem.from_uri(uri if "://" in uri else f"file://{uri}")
    options = storage or {}
    endpoint = options.get("aws_endpoint_url")
    scheme = "http" if endpoint and endpoint.startswith("http://") else "https"
    s3 = pafs.S3FileSystem(endpoint_override=endpoint.split("://", 1)[1].rstrip("/") if endpoint else None,
                           scheme=scheme, region=options.get("aws_region"))
    return s3, uri.split("://", 1)[1].rstrip("/")


def table_names_under(root: str, storage: Storage | None = None) -> list[str]:
    """The ``schema.table`` names of the Delta tables under the lake root (sorted)."""
    import pyarrow.fs as pafs

    fs, base = filesystem(root, storage)
    names = []
    for schema in fs.get_file_info(pafs.FileSelector(base, allow_not_found=True)):
        if schema.type != pafs.FileType.Directory:
            continue
        for table in fs.get_file_info(pafs.FileSelector(schema.path, allow_not_found=True)):
            log = fs.get_file_info(f"{table.path}/_delta_log")
            if table.type == pafs.FileType.Directory and log.type == pafs.FileType.Directory:
                names.append(f"{schema.base_name}.{table.base_name}")
    return sorted(names)
