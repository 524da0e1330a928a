"""The RSVP streaming job: live and replay runs, the fenced Redis sink, checkpoints (docs/streaming.md)."""
