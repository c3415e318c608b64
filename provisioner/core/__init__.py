"""The pure core: data in, data out. No I/O, no clock, no SDK, no database (tests/test_layout.py)."""
