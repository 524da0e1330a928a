"""Named exceptions that carry an operator-readable message and a process exit code."""

from __future__ import annotations


class KappaError(Exception):
    """Base of every error the CLI reports as one readable line instead of a traceback.

    Messages say what was expected, what was found and what to do.
    """

    exit_code = 1


class ConfigError(KappaError):
    """The configuration (conf/*.yaml, KAPPA_* variables or CLI arguments) is invalid."""

    exit_code = 2


class StackError(KappaError):
    """An embedded service could not be started, reached or stopped."""


class KafkaSourceError(KappaError):
    """A Kafka read or write cannot proceed (bad options, data loss, delivery failure)."""
