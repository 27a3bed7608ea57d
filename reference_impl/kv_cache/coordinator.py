"""Former home of the coordinators; the module now carries vLLM's name, `kv_cache_coordinator`.

Kept so that code importing `reference_impl.kv_cache.coordinator` keeps working.
"""

from reference_impl.kv_cache.kv_cache_coordinator import *  # noqa: F401,F403
from reference_impl.kv_cache.kv_cache_coordinator import __all__  # noqa: F401
