"""Bounded Spark jobs over the lake: gold tables recomputed by whole date partitions."""
