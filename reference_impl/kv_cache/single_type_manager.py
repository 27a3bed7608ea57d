"""Former home of the single-type managers; the module now carries vLLM's name, `single_type_kv_cache_manager`.

Kept so that code importing `reference_impl.kv_cache.single_type_kv_cache_manager` keeps working.
"""

from reference_impl.kv_cache.single_type_kv_cache_manager import *  # noqa: F401,F403
from reference_impl.kv_cache.single_type_kv_cache_manager import __all__  # noqa: F401
