"""Checkpoint paths: object-store URLs pass through untouched, local paths become absolute."""

from pathlib import Path

from longctx_trainer.checkpoint import checkpoint_location


def test_object_store_urls_are_kept():
    assert checkpoint_location("gs://bucket/run") == "gs://bucket/run"
    assert checkpoint_location("s3://bucket/run") == "s3://bucket/run"


def test_local_paths_are_absolute():
    assert checkpoint_location("ckpt") == Path("ckpt").absolute()
