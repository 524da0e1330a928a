"""What the engine asks of its host: processes and their registry, locks, signals, memory."""
