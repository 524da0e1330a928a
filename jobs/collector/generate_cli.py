"""``kappa generate``: a pipeline's generated events to stdout, a file, the collector or a topic."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from jobs.errors import ConfigError
from jobs.pipelines.cli import PIPELINE_OPTION


def generate(
    *,
    pipeline: Annotated[str | None, PIPELINE_OPTION] = None,
    count: Annotated[int, typer.Option("--count", "-n", help="How many lines (0 = endless).")] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Same seed (and --start-ms), same lines.")] = 0,
    rate: Annotated[float | None, typer.Option("--rate", help="At most this many events per second.")] = None,
    late: Annotated[float, typer.Option("--late", help="Fraction of late events (minutes behind).")] = 0.0,
    out_of_order: Annotated[float, typer.Option(
        "--out-of-order", help="Fraction of events seconds out of order.")] = 0.0,
    duplicates: Annotated[float, typer.Option(
        "--duplicates", help="Fraction re-sent (same key, same bytes).")] = 0.0,
    malformed: Annotated[float, typer.Option("--malformed", help="Fraction of malformed records.")] = 0.0,
    malformed_kinds: Annotated[str | None, typer.Option(
        "--malformed-kinds", help="Comma-separated kinds of malformed records (default: every kind "
        "the pipeline's generator has).")] = None,
    start_ms: Annotated[int | None, typer.Option(
        "--start-ms", help="Event time of the first record, epoch ms (default now).")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write JSON lines to this file.")] = None,
    to_collector: Annotated[str | None, typer.Option(
        "--to-collector", help="POST batches to this URL (e.g. http://127.0.0.1:18080/records).")] = None,
    to_topic: Annotated[str | None, typer.Option(
        "--to-topic", help="Produce straight to this topic.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Records per POST (--to-collector).")] = 500,
) -> None:
    """Generate a pipeline's events (JSON lines; stdout unless --output, --to-collector or --to-topic)."""
    from jobs.collector import emit
    from jobs.collector.cli import progress
    from jobs.config.load import load_config
    from jobs.pipelines.cli import pipeline_hook
    from jobs.pipelines.generate import GenerateOptions

    targets = [name for name, value in (("--output", output), ("--to-collector", to_collector),
                                        ("--to-topic", to_topic)) if value]
    if len(targets) > 1:
        raise ConfigError(f"choose one destination, got {' and '.join(targets)}")
    _check_numbers(count, rate, batch_size)
    cfg = load_config()
    spec, lines = pipeline_hook(pipeline, "generator")
    if lines is None:
        raise ConfigError(f"pipeline {spec.name} has no generator; name a file that defines "
                          "`lines(options)` with `generator:` in its pipeline.yaml")
    kinds = None if malformed_kinds is None else tuple(
        k.strip() for k in malformed_kinds.split(",") if k.strip())
    options = GenerateOptions(
        count or None, seed, int(time.time() * 1000) if start_ms is None else start_ms,
        cfg.collector.max_record_bytes + 1024, events_per_second=rate, late=late,
        out_of_order=out_of_order, duplicates=duplicates, malformed=malformed, malformed_kinds=kinds)
    try:
        items = lines(options)
    except ValueError as exc:
        raise ConfigError(f"invalid fault options: {exc}") from None
    started = time.monotonic()
    if to_collector:
        _check_url(to_collector)
        counts = emit.to_collector(items, to_collector, batch_size, rate, progress)
        detail = f": accepted {counts.accepted}, rejected {counts.rejected}"
    elif to_topic:
        counts, detail = emit.to_topic(items, cfg.kafka.client_config(), to_topic, rate), f" to {to_topic}"
    elif output:
        try:
            with output.open("wb") as handle:
                counts, detail = emit.to_stream(items, handle, rate), f" to {output}"
        except OSError as exc:
            raise ConfigError(f"cannot write --output {output}: {exc.strerror}") from None
    else:
        counts, detail = emit.to_stream(items, sys.stdout.buffer, rate), ""
    elapsed = time.monotonic() - started
    progress(f"generated {counts.sent} events{detail} in {elapsed:.1f}s (seed {seed})")


def _check_numbers(count: int, rate: float | None, batch_size: int) -> None:
    if count < 0:
        raise ConfigError(f"--count must be 0 (endless) or positive, got {count}")
    if rate is not None and rate <= 0:
        raise ConfigError(f"--rate must be positive events per second, got {rate}")
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1, got {batch_size}")


def _check_url(url: str) -> None:
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--to-collector must be an http:// or https:// URL, got {url!r}")
