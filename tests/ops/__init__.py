"""Tests of worker.ops."""
