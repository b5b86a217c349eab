"""Tests of the bounce intake: return paths, DSN and ARF parsing, effects, the receiver."""
