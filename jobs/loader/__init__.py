"""Placeholder package; see README "What runs today"."""
