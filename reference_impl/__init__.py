"""The reference engine: vLLM-shaped config resolution, the hybrid KV cache allocator and connectors.

This package imports neither `harness` nor `suites`."""

import logging as _logging

# A library logs; the application decides where records go (vLLM's messages are also returned as data).
_logging.getLogger(__name__).addHandler(_logging.NullHandler())
