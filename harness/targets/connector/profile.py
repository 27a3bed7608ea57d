"""The profile of a connector under test: what kind of connector it is, so that a check that does not apply to
it is reported as not applicable (`harness.outcomes`: kind `profile`, "N/A: reason") instead of a failure.

A profile says:

* `kind`: `stores` (stores KV and loads it back: a cache or an offloading tier; the default), `dummy` (fills
  the KV of a hit with dummy values, e.g. a benchmark stub: it claims hits for prompts it never stored), or
  `transfer` (moves KV between engine instances only, e.g. prefill/decode disaggregation: no local store);
* whether the class declares `SupportsHMA`;
* `multi_group`: why multi-group models do not apply on this configuration although the class declares HMA
  (e.g. a transfer mode that refuses several KV cache groups), or None;
* `async_load_config`: extra config merged into the connector's own in the checks that exercise asynchronous
  loads, for a connector that loads asynchronously only when configured to;
* `block_size_option`: the extra-config key that sets the size, in tokens, of the blocks the connector stores (its
  offloaded block or chunk, e.g. `chunk_size`; vLLM's OffloadingConnector: `block_size`), so that C40 can run it
  with a stored block 4x and 16x the GPU block; without it C40 is N/A;
* `store_scope`: `shared` (the default: every engine of one process that gets the same extra config reads one
  store: files, a server), `process` (shared by the engines of one process, and living and dying with it: a
  dict in memory, so a new process starts empty) or `engine` (the store is owned by the engine's own connector
  instances, e.g. a CPU tier indexed by the scheduler-side instance: a second engine starts empty, by design).
  Checks that read back on a second engine re-use the storing engine instead (local prefix cache forgotten, KV
  memory wiped) for an `engine` store, or are N/A where a second engine (or process) on the same store is the
  point; C36 (keys across processes) is N/A black-box for a `process` store whose objects no other process
  found (with the `kvconform_object_keys` backdoor it still compares keys).

Every MUST check decides, or says why it could not: a skip whose reason the profile (or the connector's vLLM
release) does not imply decided nothing (`harness.outcomes.decided_nothing`), and the report lists those per
connector.

A vendor declares it on the declaration of its connector under test (`harness.ConnectorUnderTest`: `kind = "dummy"`),
or in `--kv-connector-extra-config` under the key `"kvconform"` (taken out before the connector sees its extra
config; it overrides the declaration's fields), e.g. `{"chunk_size": 256, "kvconform": {"kind": "dummy", "store_scope": "engine"}}`; vLLM's own
connectors get theirs from reviewed data (`harness.targets.connector.vllm_facts.KINDS`); otherwise it is inferred:
`stores`, and HMA from the class. The run's header prints each connector's profile and where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

from harness import outcomes
from harness.targets.connector.declaration import (DECLARATION_KEY, KINDS, PROFILE_FIELDS, STORE_SCOPES,
                                                   check_field)


@dataclass(frozen=True)
class ConnectorProfile:
    """What kind of connector a target is (see the module docstring)."""

    kind: str = "stores"
    declares_hma: bool = False
    source: str = "inferred"
    multi_group: str | None = None
    async_load_config: dict = field(default_factory=dict)
    store_scope: str = "shared"
    block_size_option: str | None = None

    @property
    def engine_owned_store(self) -> bool:
        """True when only the engine that stored can read back (its own instances hold the store)."""
        return self.store_scope == "engine"

    @property
    def stores_kv(self) -> bool:
        """True when what the connector loads is what it (or a peer instance) stored: bytes are judged."""
        return self.kind == "stores"

    def describe(self) -> str:
        """One line: 'stores and loads KV, declares HMA (inferred)'."""
        hma = "declares HMA" if self.declares_hma else "does not declare HMA"
        if self.declares_hma and self.multi_group:
            hma += f" but multi-group models do not apply here ({self.multi_group})"
        extra = ", async loads configured" if self.async_load_config else ""
        if self.store_scope != "shared":
            extra += ", " + STORE_SCOPES[self.store_scope]
        return f"{KINDS[self.kind]}, {hma}{extra} ({self.source})"


def split_declaration(extra: dict) -> tuple[dict, dict]:
    """(the extra config the connector gets, the `"kvconform"` profile fields); ValueError naming a bad field, its
    value and what is accepted (the fields and their checks are the declaration's: `ConnectorUnderTest`)."""
    extra = dict(extra)
    declared = extra.pop(DECLARATION_KEY, None)
    if declared is None:
        return extra, {}
    where = f"--kv-connector-extra-config: \"{DECLARATION_KEY}\""
    if not isinstance(declared, dict):
        raise ValueError(f"{where} must be a JSON object, got {declared!r}; accepted keys: {', '.join(PROFILE_FIELDS)}")
    for key, value in declared.items():
        if key not in PROFILE_FIELDS:
            raise ValueError(f"{where} has an unknown key {key!r}; accepted: {', '.join(PROFILE_FIELDS)}")
        why = check_field(key, value)
        if why:
            raise ValueError(f"{where}.{why}")
    return extra, dict(declared)


def profile_for(declared: dict, declares_hma: bool, known_kind: str | None = None,
                known_source: str = "reviewed data", known_store_scope: str | None = None,
                known_block_size_option: str | None = None) -> ConnectorProfile:
    """The profile from a vendor's declaration, else from reviewed data (`known_kind`, `known_store_scope`,
    `known_block_size_option`), else inferred (a store shared by the engines of one process)."""
    if declared.get("kind"):
        kind, source = declared["kind"], "declared"
    elif known_kind:
        kind, source = known_kind, known_source
    else:
        kind, source = "stores", "inferred"
    if declared and source != "declared":
        source += ", options declared"
    return ConnectorProfile(kind=kind, declares_hma=declares_hma, source=source,
                            multi_group=declared.get("multi_group") or None,
                            async_load_config=dict(declared.get("async_load_config") or {}),
                            store_scope=declared.get("store_scope") or known_store_scope or "shared",
                            block_size_option=declared.get("block_size_option") or known_block_size_option)


def refuses_multi_group(reason: str) -> NoReturn:
    """End the running check as N/A because the connector, though it declares HMA, refuses several KV cache
    groups on this configuration by design (e.g. a transfer mode); the HMA verdict then says so."""
    outcomes.not_applicable("profile", reason, refuses=outcomes.MULTI_GROUP)


def not_applicable(reason: str, check: str | None = None) -> NoReturn:
    """End the running check as not applicable by the connector's profile or configuration ("N/A: reason", a
    skip the report shows as not applicable, never a failure; `check`: the check id the message names before
    the reason). An adapter may call it from a hook, e.g. when the connector refuses a configuration by design."""
    outcomes.not_applicable("profile", reason, check=check)
