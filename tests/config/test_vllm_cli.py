"""vLLM's command line for the HMA flag per era (config-rules.md 1.1, 2.1 and 3.1), hand-written tables."""

import pytest

from reference_impl.config import resolve_case

FLAG = "hybrid-kv-cache-manager"
REJECTED = "rejected"

TABLE = [
    # era, argv, parsed flag or REJECTED
    ("pre-seed", [], False),  # absent == False before the seed
    ("pre-seed", [f"--disable-{FLAG}"], True),
    ("pre-seed", [f"--no-disable-{FLAG}"], False),
    ("pre-seed", [f"--enable-{FLAG}"], REJECTED),
    ("seed", [], None),
    ("seed", [f"--disable-{FLAG}"], True),
    ("seed", [f"--no-disable-{FLAG}"], False),
    ("seed", [f"--enable-{FLAG}"], REJECTED),
    ("seed", ["--disable_hybrid_kv_cache_manager"], True),
    ("seed", [f"--disable-{FLAG}", f"--no-disable-{FLAG}"], False),
    ("0.32.0", [f"--enable-{FLAG}"], REJECTED),
    ("v0.33", [], None),
    ("v0.33", [f"--disable-{FLAG}"], True),
    ("v0.33", [f"--enable-{FLAG}"], False),
    ("v0.33", [f"--no-disable-{FLAG}"], False),
    ("v0.33", [f"--no-enable-{FLAG}"], REJECTED),
    ("v0.33", ["--enable_hybrid_kv_cache_manager"], False),
    ("v0.33", [f"--enable-{FLAG}", f"--disable-{FLAG}"], True),
    ("v0.33", [f"--disable-{FLAG}", f"--enable-{FLAG}"], False),
    ("v0.33", ["--no-such-flag"], REJECTED),
]


@pytest.mark.parametrize("era, argv, want", TABLE, ids=[f"{e}-{' '.join(a) or 'absent'}" for e, a, _ in TABLE])
def test_cli_parse(era, argv, want):
    result = resolve_case({"profile": era, "stage": "cli_parse", "cli_args": argv})
    if want == REJECTED:
        assert result["error"] is not None, f"{era} should reject {argv}: {result}"
        assert result["error"]["type"] == "SystemExit" and result["error"]["stage"] == "cli_parse", result
        assert "unrecognized arguments" in result["error"]["text"], result
    else:
        assert result["error"] is None, f"{era} should accept {argv}: {result}"
        if era == "pre-seed" and want is False:
            # the parsed value is None (absent) or False; both mean the same before the seed
            assert result["resolved_disable_hma"] in (None, False), result
        else:
            assert result["resolved_disable_hma"] is want, f"{era} {argv}: {result}"


def test_json_flags_feed_the_resolution():
    result = resolve_case({
        "profile": "seed",
        "cli_args": ["--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}', "--kv-events-config={}"],
    })
    assert result["resolved_disable_hma"] is True
    assert "kv_events_present" in result["rules"] and "kv_transfer_present" in result["rules"], result


def test_speculative_and_hf_overrides():
    result = resolve_case({
        "profile": "seed", "flag": None,
        "cli_args": ["--no-disable-hybrid-kv-cache-manager", "--speculative-config", '{"method": "eagle"}',
                     "--hf-overrides", '{"attention_chunk_size": 8192}'],
    })
    assert result["error"] and "--no-disable-hybrid-kv-cache-manager flag" in result["error"]["text"], result


def test_bad_json_is_an_argparse_error():
    result = resolve_case({"profile": "seed", "cli_args": ["--kv-transfer-config", "{oops"]})
    assert result["error"]["type"] == "SystemExit" and "--kv-transfer-config" in result["error"]["text"], result


def test_offloading_flags_absent_before_0_11_1():
    result = resolve_case({"vllm_version": "0.11.0", "stage": "cli_parse", "cli_args": ["--kv-offloading-size", "4"]})
    assert result["error"]["type"] == "SystemExit", result
