"""The pipelines on the platform, each a folder: ``pipeline.yaml`` and its code.

Reference: docs/reference/pipeline-yaml.md.
"""
