"""Render a LongContextJob into Kubernetes objects: pure functions that build them as data."""

from .workload import Workload, render_workload, render_yaml

__all__ = ["Workload", "render_workload", "render_yaml"]
