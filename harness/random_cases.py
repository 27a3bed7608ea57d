"""Random config cases for differential runs (the resolver against a real vLLM): seeded, reproducible, valid.

Every case follows the `kvconform resolve` schema and draws from the dimensions the HMA rules read: flag,
platform, stage, environment, kv events, chunked local attention, speculative methods (built-in names, custom
methods and names vLLM does not know), HiSparse, KV offloading, and connector trees (registered names, names
the release does not register, module-path classes, MultiConnector children and grandchildren, each with or
without kv_role, with `kv_connector_extra_config` values such as Nixl's `transfer_mode` and HiSparse's
`host_pool_gib`). Values are weighted towards what a user configures, so most cases reach the HMA block.
"""

from __future__ import annotations

import random
from typing import Any

from reference_impl.config.eras import ERAS_BY_ID

MODULE_PATH = "suites.config.external_connectors"
MODULE_CLASSES = ("ExternalHMAConnector", "ExternalPlainConnector", "LegacyTwoArgConnector", "RenamedMultiConnector",
                  "LMCacheConnectorV1", "NoSuchClass")
UNREGISTERED = ("FooConnector", "P2pNcclConnector", "UMBPStoreConnector")
CHUNKED_ENV = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"
# Built-in methods the vllm target can build on a CPU from its tiny models, and names vLLM does not know.
SPECULATIVE_NAMES = ("eagle", "eagle3", "mtp", "ngram", "draft_model", "no_such_method")
TRANSFER_MODES = ("pull", "push", "sideways", "PULL", None, 1)
HOST_POOLS = (4, 0.5, 0, -1, "2", "abc", None, [1])


def _pick(rng: random.Random, weighted: list[tuple[Any, int]]) -> Any:
    values, weights = zip(*weighted)
    return rng.choices(values, weights=weights)[0]


class CaseGenerator:
    """Draws cases for one era; `case(i)` is a pure function of (seed, i)."""

    def __init__(self, era_id: str, version: str, seed: int):
        era = ERAS_BY_ID[era_id]
        self.version = version
        self.seed = seed
        self.registered = sorted(era.connectors())
        self.platforms = ("cuda", "rocm", "xpu", "cpu", "tpu", "unspecified")

    def _extra(self, rng: random.Random, name: str | None) -> dict | None:
        """A connector's extra config: the keys its class reads, sometimes missing or wrong."""
        extra: dict[str, Any] = {}
        if name == "NixlConnector" and rng.random() < 0.7:
            extra["transfer_mode"] = rng.choice(TRANSFER_MODES)
        if name == "HiSparseConnector" and rng.random() < 0.8:
            extra["host_pool_gib"] = rng.choice(HOST_POOLS)
        if rng.random() < 0.1:
            extra["some_option"] = rng.choice([1, "x", True])
        return extra or None

    def _name(self, rng: random.Random) -> tuple[str, str | None]:
        """(connector name, module path) for one connector of a tree."""
        kind = _pick(rng, [("registered", 12), ("multi", 3), ("unregistered", 1), ("module", 2)])
        if kind == "multi":
            return "MultiConnector", None
        if kind == "unregistered":
            return rng.choice(UNREGISTERED), None
        if kind == "module":
            return rng.choice(MODULE_CLASSES), MODULE_PATH
        # the connectors whose extra config a release reads, more often than the others
        keyed = [name for name in ("NixlConnector", "HiSparseConnector") if name in self.registered]
        if keyed and rng.random() < 0.25:
            return rng.choice(keyed), None
        return rng.choice(self.registered), None

    def _connector(self, rng: random.Random, depth: int) -> dict[str, Any]:
        """One child of a MultiConnector, in the schema's object form (children nested `depth` more levels)."""
        name, module_path = self._name(rng)
        child: dict[str, Any] = {"kv_connector": name}
        if rng.random() < 0.9:
            child["kv_role"] = _pick(rng, [("kv_both", 8), ("kv_producer", 1), ("kv_consumer", 1)])
        if module_path:
            child["kv_connector_module_path"] = module_path
        if name.endswith("MultiConnector") and depth > 0 and rng.random() < 0.85:
            child["children"] = [self._connector(rng, depth - 1) for _ in range(rng.randint(0, 2))]
        extra = self._extra(rng, name)
        if extra:
            child["kv_connector_extra_config"] = extra
        return child

    def case(self, index: int) -> dict[str, Any]:
        """Case number `index` of this generator's sequence."""
        rng = random.Random(f"{self.seed}-{index}")
        case: dict[str, Any] = {"id": f"random-{self.seed}-{index}", "vllm_version": self.version}
        case["flag"] = _pick(rng, [(None, 3), (True, 1), (False, 2)])
        case["platform"] = _pick(rng, [("cuda", 6), ("rocm", 1), ("xpu", 1), ("cpu", 2), ("tpu", 1), ("unspecified", 1)])
        case["stage"] = _pick(rng, [("config", 3), ("create_connector", 1)])
        if rng.random() < 0.75:
            top = self._connector(rng, depth=2)
            case["kv_connector"] = top["kv_connector"]
            case["kv_role"] = top.get("kv_role", "kv_both")
            if "kv_connector_module_path" in top:
                case["kv_connector_module_path"] = top["kv_connector_module_path"]
            if top["kv_connector"].endswith("MultiConnector"):
                case["multi_connector_children"] = top.get("children") or [self._connector(rng, 1)]
            if "kv_connector_extra_config" in top:
                case["kv_connector_extra_config"] = top["kv_connector_extra_config"]
        if rng.random() < 0.15:
            case["kv_events"] = True
        if rng.random() < 0.35:
            case["attention_chunk_size"] = 8192
            if rng.random() < 0.5:
                case["env"] = {CHUNKED_ENV: rng.choice(["0", "1"])}
        if rng.random() < 0.3:
            if rng.random() < 0.4:
                case["speculative_method"] = {"name": "kvconform_drafter",
                                              "uses_target_hidden_states": rng.random() < 0.5}
            else:
                case["speculative_method"] = rng.choice(SPECULATIVE_NAMES)
        if rng.random() < 0.12:
            case["hisparse"] = True
        if rng.random() < 0.15:
            case["kv_offloading_size"] = rng.choice([4, 0.5])
            case["kv_offloading_backend"] = rng.choice(["native", "lmcache"])
            if rng.random() < 0.3:
                case.setdefault("env", {})["VLLM_USE_SIMPLE_KV_OFFLOAD"] = "1"
        return case

    def cases(self, count: int, start: int = 0) -> list[dict[str, Any]]:
        """`count` cases from number `start` on."""
        return [self.case(index) for index in range(start, start + count)]
