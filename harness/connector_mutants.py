"""The project's catalogue of connector bug classes as mutations of the template connector, for the suite's own
mutation score (`kvconform mutate`, harness/commands/mutate.py).

Each mutant is the template (`reference_impl/connector/template.py`) with one bug class injected by a text edit:
the bug the buggy connector of tests/connector/buggy.py named beside it carries into the LMCache-like connector,
here carried into the smallest connector that passes the suite. `check` is the check written for the class; a
mutant counts as caught when any check fails on it. Every `old` text occurs exactly once in the template (a test
holds it), so an edit of the template that moves a rule makes that test fail rather than a mutant silently not
apply. A mutant runs under the template's declaration (`harness.targets.connector.template_declaration`), whose
backdoors read the mutated instance's state, as they read the template's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TEMPLATE_PATH = Path(__file__).resolve().parents[1] / "reference_impl" / "connector" / "template.py"
TEMPLATE_CLASS = "TemplateConnector"
# The template's declaration (its profile: a store that lives and dies with its process, so C36 is N/A black-box; how
# it loads asynchronously; which option sets the size of the blocks it stores (C40); and its backdoors). A mutant is
# run as that declaration of the mutated copy (`declaration_source`), as a vendor runs a copy of the template.
DECLARATION_MODULE = "harness.targets.connector.template_declaration"
DECLARATION_CLASS = "TemplateConnectorUnderTest"


@dataclass(frozen=True)
class Mutant:
    """One bug class injected into the template: `edits` are (old text, new text) pairs applied in order."""

    name: str
    bug: str
    check: str
    twin: str | None  # the buggy connector of tests/connector/buggy.py with the same bug class, if any
    edits: tuple[tuple[str, str], ...]


MUTANTS: tuple[Mutant, ...] = (
    Mutant("block-ids-zero", "every group's KV moves through the first group's block table", "C17",
           "BlockIdsZeroConnector", (
               ("ids = [tables[gid][p] if p < len(tables[gid]) and p >= start // g.block_size else NULL",
                "ids = [tables[0][p] if p < len(tables[0]) and p >= start // g.block_size else NULL"),
               ("                table = state.tables[gid]\n", "                table = state.tables[0]\n"),
           )),
    Mutant("null-block-writer", "loads write the positions of null blocks too (into block 0)", "C15",
           "NullBlockWriterConnector", (
               ("slots = [i for i, b in enumerate(t.block_ids) if b != NULL]",
                "slots = list(range(len(t.block_ids)))"),
           )),
    Mutant("null-block-storing", "an object is stored although a block of it is null (out of the window)", "C15",
           "NullBlockStoringConnector", (
               ("if NULL not in ids and not self._stored(g, hashes[chunk]):", "if not self._stored(g, hashes[chunk]):"),
           )),
    Mutant("window-blind-hit", "the hit rule ignores the sliding-window and Mamba groups (full attention decides)",
           "C07", "FullAttentionHitConnector", (
               ("present = {gid: [self._stored(g, h) for h in hashes] for gid, g in self.groups.items()}",
                "present = {gid: [self._stored(g, h) or g.window_chunks(self.chunk_size) >= 0 for h in hashes]\n"
                "                   for gid, g in self.groups.items()}"),
           )),
    Mutant("mamba-blind-hit", "the hit rule ignores the Mamba state (any chunk end counts)", "C07",
           "MambaBlindHitConnector", (
               ("present = {gid: [self._stored(g, h) for h in hashes] for gid, g in self.groups.items()}",
                "present = {gid: [self._stored(g, h) or g.kind == MAMBA for h in hashes] for gid, g in self.groups.items()}"),
           )),
    Mutant("late-store-copy", "each step's stores are copied one step late, from blocks that may have been reused",
           "C24", "OutOfWindowStoreConnector", (
               ("        for save in meta.saves:\n",
                "        late, self._late = getattr(self, \"_late\", []), meta.saves\n        for save in late:\n"),
           )),
    Mutant("silent-load-failure", "a load whose objects are missing is reported finished, not failed", "C22",
           "PerBlockLoadErrorConnector", (
               ("                self._failed_loads.add(req_id)\n", ""),
           )),
    Mutant("process-salted-keys", "keys mix in Python's per-process salted hash()", "C36",
           "ProcessSaltedKeysConnector", (
               ("        return chunk_hashes(request.all_token_ids[:num_tokens], self.chunk_size,\n"
                "                            cache_salt=getattr(request, \"cache_salt\", None), lora_name=lora)",
                "        return [h + (hash(h) & (2**63 - 1)).to_bytes(8, \"little\") for h in chunk_hashes(\n"
                "            request.all_token_ids[:num_tokens], self.chunk_size,\n"
                "            cache_salt=getattr(request, \"cache_salt\", None), lora_name=lora)]"),
           )),
    Mutant("salt-blind-keys", "keys ignore the request's cache salt", "C30", "SaltBlindConnector", (
        ("cache_salt=getattr(request, \"cache_salt\", None), lora_name=lora)",
         "cache_salt=None, lora_name=lora)"),
    )),
    Mutant("lora-blind-keys", "keys ignore the request's LoRA adapter", "C30", "LoRABlindConnector", (
        ("cache_salt=getattr(request, \"cache_salt\", None), lora_name=lora)",
         "cache_salt=getattr(request, \"cache_salt\", None), lora_name=None)"),
    )),
    Mutant("model-blind-keys", "keys ignore the model name", "C30", "ModelBlindKeysConnector", (
        ("return object_key(self.model, self.world_size,", "return object_key(\"model\", self.world_size,"),
    )),
    Mutant("dtype-blind-keys", "keys ignore the KV dtype", "C30", "DtypeBlindKeysConnector", (
        ("group_id, chunk_hash, self.groups[group_id].dtype)", "group_id, chunk_hash, \"\")"),
    )),
    Mutant("tp-size-blind-keys", "keys carry the TP rank but not the TP size", "C30", "TPSizeBlindKeysConnector", (
        ("return object_key(self.model, self.world_size,", "return object_key(self.model, 1,"),
    )),
    Mutant("kernel-ratio-ignored", "registered tensors indexed by manager block id though they hold kernel blocks",
           "C18", "KernelRatioIgnoringConnector", (
               ("self._kernel_ratio = attention[0].shape[0] // self.num_blocks if attention else 1",
                "self._kernel_ratio = 1"),
           )),
    Mutant("window-within-one-chunk", "a sliding window is assumed never to span more than one chunk", "C14",
           "WindowWithinOneChunkConnector", (
               ("first = max(start // self.chunk_size, g.first_chunk(last, self.chunk_size))",
                "first = max(start // self.chunk_size, g.first_chunk(last, self.chunk_size),\n"
                "                        last - 1 if g.sliding_window else 0)"),
           )),
    Mutant("half-precision-store", "objects are kept in float16 whatever the KV dtype", "C14",
           "HalfPrecisionStoreConnector", (
               ("[kv.index_select(0, rows) for kv in self._tensors(group)]",
                "[kv.index_select(0, rows).to(torch.float16).to(kv.dtype) for kv in self._tensors(group)]"),
           )),
    Mutant("double-finished-recv", "every finished load is reported again in the next step", "C21",
           "DoubleFinishedRecvConnector", (
               ("        self._finished_loads, self._failed_loads = set(), set()\n",
                "        self._failed_loads = set()\n"),
           )),
    Mutant("sync-load-reported", "synchronous loads are reported in finished_recving too", "C14",
           "SyncLoadFinishedRecvConnector", (
               ("            if self.load_async:\n                self._finished_loads.add(req_id)",
                "            self._finished_loads.add(req_id)"),
           )),
    Mutant("local-prefix-overwritten", "a load also writes the blocks of vLLM's local prefix-cache hit", "C19", None, (
        ("ids = [tables[gid][p] if p < len(tables[gid]) and p >= start // g.block_size else NULL",
         "ids = [tables[gid][p] if p < len(tables[gid]) else NULL"),
    )),
    Mutant("state-kept-after-finish", "the finish hook keeps the request's state (a leak)", "C31", "PinLeakConnector", (
        ("        self._requests.pop(request.request_id, None)\n        self._failed.discard(request.request_id)\n",
         "        self._failed.discard(request.request_id)\n"),
    )),
)


def mutant(name: str) -> Mutant:
    """The mutant called `name`; ValueError naming the accepted names otherwise."""
    for candidate in MUTANTS:
        if candidate.name == name:
            return candidate
    raise ValueError(f"no mutant {name!r}; accepted: {', '.join(m.name for m in MUTANTS)}")


def mutated_source(candidate: Mutant, source: str | None = None) -> str:
    """The template's source with `candidate`'s edits applied; ValueError when an edit's old text does not occur
    exactly once (the template changed under the mutant)."""
    text = TEMPLATE_PATH.read_text() if source is None else source
    for old, new in candidate.edits:
        count = text.count(old)
        if count != 1:
            raise ValueError(f"mutant {candidate.name}: the text to replace occurs {count} times in the template "
                             f"(expected once): {old.strip()[:80]!r}")
        text = text.replace(old, new)
    return text


def declaration_source(module: str) -> str:
    """A module declaring the mutated copy importable as `module` as the template is declared (its profile and its
    backdoors, which read the mutant's own state): `DECLARATION_CLASS` names it, and the connector keeps the
    template's class name, so cells and results name `TemplateConnector` as on the template."""
    return (f'"""The template\'s declaration over the mutated copy `{module}` (kvconform mutate)."""\n\n'
            f"from {DECLARATION_MODULE} import {DECLARATION_CLASS} as _Template\n"
            f"from {module} import {TEMPLATE_CLASS}\n\n\n"
            f"class {DECLARATION_CLASS}(_Template):\n"
            f'    """The template\'s declaration, its connector the mutant."""\n\n'
            f"    connector = {TEMPLATE_CLASS}\n")
