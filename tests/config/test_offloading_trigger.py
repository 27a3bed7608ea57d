"""What turns the kv-offloading shortcut on, release by release: the command lines of issue 36.

0.11.1 - 0.13.x: `--kv-offloading-backend` triggers it (no default), and then demands `--kv-offloading-size`
(0.13.0 config/vllm.py:477-487); a size alone does nothing. From 0.14.0 the backend defaults to "native" and the
size alone triggers it (0.14.0 config/cache.py:152-161, config/vllm.py:501-503); a backend alone does nothing.
The shortcut runs after the HMA block until 0.21.x (HMA resolved on, then OffloadingConnector, SupportsHMA only
from 0.21.0, fails the factory's check) and before it from 0.22.0. From 0.19.0 the native backend installs
SimpleCPUOffloadConnector under VLLM_USE_SIMPLE_KV_OFFLOAD=1 (0.19.0 config/vllm.py:659-664).

Every expected summary below was written by hand from those source lines (golden format: `on` = HMA enabled,
`error <type>@<stage> <message id>`), never produced by the code under test; the rows marked in
docs/vllm-0.34.md were also compared with the real releases through the vllm config target. Each row runs through
the reference resolver (as the command line, the way `kvconform explain` reads it) and through the matrix's
independent oracle (as case fields).
"""

from __future__ import annotations

import pytest

from reference_impl.config import resolve_case
from suites.config.oracle import SIMPLE_OFFLOAD_ENV, expected_outcome
from suites.config.outcomes import summarize

SIZE = ["--kv-offloading-size", "4"]
NATIVE = ["--kv-offloading-backend", "native"]
LMCACHE = ["--kv-offloading-backend", "lmcache"]
E_F_OFFLOADING = "error ValueError@create_connector E-F(OffloadingConnector)"
NO_SIZE = "error ValueError@config E-OFFLOAD-NO-SIZE"
SIMPLE = {SIMPLE_OFFLOAD_ENV: "1"}

# (release, command line, stage, env, expected summary)
ROWS = [
    # the command line: `--platform cuda --kv-offloading-size 4`, to the connector's creation
    *[(version, SIZE, "create_connector", {}, "on") for version in ("0.11.1", "0.12.0", "0.13.0")],
    *[(version, SIZE, "create_connector", {}, E_F_OFFLOADING)
      for version in ("0.14.0", "0.15.0", "0.16.0", "0.17.0", "0.18.0", "0.19.0", "0.20.0")],
    *[(version, SIZE, "create_connector", {}, "on")
      for version in ("0.21.0", "0.22.0", "0.23.0", "0.24.0", "0.25.0", "0.30.0", "0.32.0", "0.33.0", "0.34.0")],
    # at config the shortcut after the block leaves HMA on; the factory is what refuses
    ("0.14.0", SIZE, "config", {}, "on"),
    ("0.13.0", SIZE, "config", {}, "on"),
    # the backend alone: an error while it is the trigger, nothing once the size is
    *[(version, NATIVE, stage, {}, NO_SIZE) for version in ("0.11.1", "0.12.0", "0.13.0")
      for stage in ("config", "create_connector")],
    ("0.13.0", LMCACHE, "config", {}, NO_SIZE),
    *[(version, backend, "create_connector", {}, "on") for version in ("0.14.0", "0.20.0", "0.22.0", "0.33.0", "0.34.0")
      for backend in (NATIVE, LMCACHE)],
    # the error comes after the HMA block: an explicit enable that the block refuses (KV events, 0.13) fails first
    ("0.13.0", ["--no-disable-hybrid-kv-cache-manager", "--kv-events-config", '{"enable_kv_cache_events": true}',
                *NATIVE], "config", {}, "error ValueError@config E-B"),
    ("0.13.0", ["--no-disable-hybrid-kv-cache-manager", *NATIVE], "config", {}, NO_SIZE),
    # VLLM_USE_SIMPLE_KV_OFFLOAD=1 picks SimpleCPUOffloadConnector (SupportsHMA) from 0.19.0 only
    ("0.18.0", SIZE, "create_connector", SIMPLE, E_F_OFFLOADING),
    ("0.19.0", SIZE, "create_connector", SIMPLE, "on"),
    ("0.20.0", SIZE, "create_connector", SIMPLE, "on"),
    # both given: as before
    ("0.13.0", [*NATIVE, *SIZE], "create_connector", {}, E_F_OFFLOADING),
    ("0.14.0", [*NATIVE, *SIZE], "create_connector", {}, E_F_OFFLOADING),
]


def _id(row) -> str:
    version, argv, stage, env, _ = row
    return f"{version}-{'_'.join(a.lstrip('-') for a in argv)}-{stage}" + ("-" + "-".join(env) if env else "")


@pytest.mark.parametrize("row", ROWS, ids=[_id(row) for row in ROWS])
def test_command_line_through_the_resolver(row):
    version, argv, stage, env, expected = row
    case = {"id": "issue-36", "vllm_version": version, "platform": "cuda", "cli_args": argv, "stage": stage, "env": env}
    assert summarize(resolve_case(case)) == expected


_CLI_FIELDS = {"--kv-offloading-size": ("kv_offloading_size", float), "--kv-offloading-backend": ("kv_offloading_backend", str)}


@pytest.mark.parametrize("row", [row for row in ROWS if set(row[1][::2]) <= set(_CLI_FIELDS)],
                         ids=[_id(row) for row in ROWS if set(row[1][::2]) <= set(_CLI_FIELDS)])
def test_case_fields_through_the_oracle(row):
    version, argv, stage, env, expected = row
    case = {"id": "issue-36", "vllm_version": version, "platform": "cuda", "stage": stage, "env": env}
    for option, value in zip(argv[::2], argv[1::2]):
        field, kind = _CLI_FIELDS[option]
        case[field] = kind(value)
    assert summarize(expected_outcome(case).outcome) == expected
