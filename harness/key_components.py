"""What a KV-cache object's key must tell apart, and the message a connector check gives when a key does not.

One home for the key components a connector's store keys must carry (cache salt, LoRA adapter, model name, KV
dtype, TP size and rank, KV cache group), the root cause a leak across one of them is ("keys ignore the LoRA
adapter"), and the failure message that says what was stored, what was asked and which component differed. The
connector checks build `KeyComponents` records from what they stored and what they asked (never from text); the
findings page of vLLM's connectors (`harness.report.vllm_findings`) classifies a failing cell by the components
its record names, so the check's message and the page's root cause are the same words.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# component -> what a reader calls it; the order the messages list components in
COMPONENTS = {
    "cache_salt": "cache salt",
    "lora": "LoRA adapter",
    "model": "model name",
    "dtype": "KV dtype",
    "tp_size": "TP size",
    "tp_rank": "TP rank",
    "group": "KV cache group",
}


@dataclass(frozen=True)
class KeyComponents:
    """What one stored object (or one lookup) is keyed by, as the check that stored (or asked) it knows it:
    `cache_salt` and `lora` (the adapter's name) None when the request has none; `group` None for every group
    of the request."""

    model: str
    dtype: str
    tp_size: int
    tp_rank: int | None = None
    cache_salt: str | None = None
    lora: str | None = None
    group: int | None = None

    def value(self, component: str) -> str:
        """One component's value as the messages show it ('none', 'every' for every rank or group)."""
        value = getattr(self, component)
        if value is None:
            return "every" if component in ("tp_rank", "group") else "none"
        return str(value).removeprefix("torch.")

    def describe(self) -> str:
        """Every component: 'cache salt none, LoRA adapter adapter-a, model name M, KV dtype float16, TP size 1,
        TP rank every, KV cache group every'."""
        return ", ".join(f"{COMPONENTS[c]} {self.value(c)}" for c in COMPONENTS)

    def as_record(self) -> dict:
        """The record as JSON (a results file's field)."""
        return asdict(self)


def differing(stored: KeyComponents, asked: KeyComponents) -> tuple[str, ...]:
    """The components (names of `COMPONENTS`, in its order) in which `asked` differs from `stored`; a lookup of
    every rank or group (None) differs in neither from one of them."""
    found = []
    for name in COMPONENTS:
        a, b = getattr(stored, name), getattr(asked, name)
        if a != b and not (name in ("tp_rank", "group") and None in (a, b)):
            found.append(name)
    return tuple(found)


def key_cause(components) -> str:
    """The root cause of a leak across `components`: 'keys ignore the LoRA adapter', 'keys ignore the TP size and TP
    rank'. ValueError for a name that is not a component."""
    names = [c for c in COMPONENTS if c in set(components)]
    unknown = sorted(set(components) - set(COMPONENTS))
    if unknown or not names:
        what = f"key component {unknown[0]!r} is not accepted" if unknown else "no key component given"
        raise ValueError(f"{what}; accepted: {', '.join(COMPONENTS)}")
    nouns = [COMPONENTS[c] for c in names]
    joined = nouns[0] if len(nouns) == 1 else ", ".join(nouns[:-1]) + " and " + nouns[-1]
    return f"keys ignore the {joined}"


@dataclass(frozen=True)
class KeyLeak:
    """A connector served (or tried to serve) objects stored under one key to a request of another: what was
    stored, what was asked, and what the check saw (`symptom`, e.g. 'hit 768 tokens on objects stored under
    another key')."""

    stored: KeyComponents
    asked: KeyComponents
    symptom: str

    @property
    def components(self) -> tuple[str, ...]:
        """The key components that differ between what was stored and what was asked."""
        return differing(self.stored, self.asked)

    def asked_with(self) -> str:
        """What the lookup asked with instead: 'LoRA adapter adapter-b' (every differing component)."""
        return ", ".join(f"{COMPONENTS[c]} {self.asked.value(c)}" for c in self.components)

    def as_record(self) -> dict:
        """The leak as JSON (a results file's field)."""
        return {"components": list(self.components), "stored": self.stored.as_record(),
                "asked": self.asked.as_record(), "symptom": self.symptom}


def leaks_cause(leaks) -> str:
    """The root cause of `leaks` together: 'keys ignore the cache salt and LoRA adapter'."""
    return key_cause({c for leak in leaks for c in leak.components})


def leaks_message(leaks) -> str:
    """A check's failure for `leaks` (one or more), on one line: the root cause, then for each leak every component
    of what was stored, what the lookup asked with instead, and what the check saw: 'keys ignore the LoRA adapter:
    stored under {cache salt none, LoRA adapter adapter-a, model name M, KV dtype float16, TP size 1, TP rank every,
    KV cache group every}, asked with LoRA adapter adapter-b: hit 768 tokens on objects stored under another key'.
    The record in braces is the cell's own (`harness.failure_groups.cause_key` leaves it out)."""
    leaks = list(leaks)
    parts = [f"stored under {{{leak.stored.describe()}}}, asked with {leak.asked_with()}: {leak.symptom}"
             for leak in leaks]
    return f"{leaks_cause(leaks)}: " + "; and: ".join(parts)


def leaks_record(leaks) -> dict:
    """What a check's results record keeps of `leaks`: the differing components (`harness.report.vllm_findings`
    classifies by them), the root cause and each leak."""
    leaks = list(leaks)
    return {"components": [c for c in COMPONENTS if any(c in leak.components for leak in leaks)],
            "cause": leaks_cause(leaks), "leaks": [leak.as_record() for leak in leaks]}


def record_components(record: dict | None) -> tuple[str, ...]:
    """The differing components a results record's `key_leak` names (() when it has none)."""
    if not isinstance(record, dict):
        return ()
    return tuple(c for c in record.get("components") or () if c in COMPONENTS)
