"""Benchmarks for otel-errcompact: real-error corpus and compaction measurements."""
