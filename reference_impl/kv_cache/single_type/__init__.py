"""The single-type managers, one class family per module: `base` (`SingleTypeKVCacheManager`, the shared
table logic), `full_attention` (full attention and the managers built on it: RSWA, circular buffers),
`sliding_window`, `chunked_local_attention`, `mamba`, `cross_attention` and `hisparse` (HiSparse's source, hot
and resident groups).

Import them from `reference_impl.kv_cache.single_type_kv_cache_manager`, vLLM's module name, which re-exports
every class and holds the spec -> manager dispatch (`spec_manager_map`); this package imports nothing itself.
"""
