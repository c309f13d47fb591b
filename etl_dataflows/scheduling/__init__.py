"""Per-batch scheduling decisions from cheap statistics (see :mod:`.decision`)."""
