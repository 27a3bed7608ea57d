"""The key components a failing key check names (`harness.key_components`): what differs between what was stored
and what was asked, the root cause in the words the findings page uses, and the one-line message."""

from __future__ import annotations

import pytest

from harness.key_components import KeyComponents, KeyLeak, differing, key_cause, leaks_message, leaks_record

BASE = KeyComponents(model="org/model", dtype="torch.float16", tp_size=1)


def test_each_component_alone_differs_by_its_own_name():
    cases = {"cache_salt": {"cache_salt": "t"}, "lora": {"lora": "adapter-b"}, "model": {"model": "org/other"},
             "dtype": {"dtype": "torch.bfloat16"}, "tp_size": {"tp_size": 2}, "tp_rank": {"tp_rank": 1},
             "group": {"group": 1}}
    for component, change in cases.items():
        stored = BASE if component not in ("tp_rank", "group") else KeyComponents(**{**BASE.as_record(),
                                                                                      component: 0})
        asked = KeyComponents(**{**BASE.as_record(), **change})
        assert differing(stored, asked) == (component,), component


def test_every_rank_or_group_differs_from_none_of_them():
    """A lookup of every rank (None) is not a leak across ranks from one rank's object."""
    assert differing(KeyComponents("m", "d", 2, tp_rank=0), KeyComponents("m", "d", 2)) == ()


def test_root_causes_are_the_findings_pages_words():
    assert key_cause(["lora"]) == "keys ignore the LoRA adapter"
    assert key_cause(["tp_rank", "tp_size"]) == "keys ignore the TP size and TP rank"
    assert key_cause(["dtype", "cache_salt", "model"]) == "keys ignore the cache salt, model name and KV dtype"
    with pytest.raises(ValueError, match="key component 'salt' is not accepted; accepted: cache_salt, lora"):
        key_cause(["salt"])


def test_the_message_says_what_was_stored_what_was_asked_and_the_cause():
    stored = KeyComponents("org/model", "torch.float16", 1, lora="adapter-a")
    asked = KeyComponents("org/model", "torch.float16", 1, lora="adapter-b")
    salt_leak = KeyLeak(KeyComponents("org/model", "torch.float16", 1, cache_salt="a"),
                        KeyComponents("org/model", "torch.float16", 1, cache_salt="b"), "hit 16 tokens")
    leak = KeyLeak(stored, asked, "hit 768 tokens on objects stored under another key")
    assert leaks_message([leak]) == (
        "keys ignore the LoRA adapter: stored under {cache salt none, LoRA adapter adapter-a, model name org/model, "
        "KV dtype float16, TP size 1, TP rank every, KV cache group every}, asked with LoRA adapter adapter-b: hit 768 "
        "tokens on objects stored under another key")
    both = leaks_message([salt_leak, leak])
    assert both.startswith("keys ignore the cache salt and LoRA adapter: stored under {cache salt a,")
    assert "asked with cache salt b: hit 16 tokens; and: stored under {cache salt none, LoRA adapter adapter-a" in both
    record = leaks_record([leak, salt_leak])
    assert record["components"] == ["cache_salt", "lora"] and record["cause"] == "keys ignore the cache salt and LoRA adapter"
    assert record["leaks"][0]["stored"]["lora"] == "adapter-a" and record["leaks"][0]["asked"]["lora"] == "adapter-b"


def test_one_root_cause_on_several_presets_groups_as_one():
    """The record of what was stored names the check's model (one per preset and check); the failure groups leave
    it out, so a salt-blind key on three presets reads as one root cause."""
    from harness.failure_groups import cause_key

    def message(preset):
        stored = KeyComponents(f"kvconform/{preset}/kvconform-1a2b3c4d-0", "torch.float16", 1, cache_salt="tenant-a")
        asked = KeyComponents(f"kvconform/{preset}/kvconform-1a2b3c4d-0", "torch.float16", 1, cache_salt="tenant-b")
        return leaks_message([KeyLeak(stored, asked, "hit 768 tokens on objects stored under another key")])

    assert cause_key(message("fa_only")) == cause_key(message("fa+swa+mamba"))
    assert cause_key(message("fa_only")) != cause_key(message("fa_only").replace("cache salt", "LoRA adapter"))
