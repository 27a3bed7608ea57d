"""Former home of the layer specs and KV cache configuration types; the module now carries vLLM's name, `kv_cache_interface`.

Kept so that code importing `reference_impl.kv_cache.kv_cache_interface` keeps working.
"""

from reference_impl.kv_cache.kv_cache_interface import *  # noqa: F401,F403
from reference_impl.kv_cache.kv_cache_interface import __all__  # noqa: F401
