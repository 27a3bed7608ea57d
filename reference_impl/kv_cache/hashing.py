"""Former home of the prefix block hashes; the module now carries vLLM's name, `kv_cache_utils`.

Kept so that code importing `reference_impl.kv_cache.kv_cache_utils` keeps working.
"""

from reference_impl.kv_cache.kv_cache_utils import *  # noqa: F401,F403
from reference_impl.kv_cache.kv_cache_utils import __all__  # noqa: F401
