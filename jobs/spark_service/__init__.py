"""The local Spark service: a driver that stays up and runs replays, loads and batch jobs."""
