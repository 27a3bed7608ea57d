"""The `pytest11` entry point of kvconform: loads the plugin module of each concern.

One entry point keeps installation simple; each concern (results collection, the config matrix,
the allocator target, the connector target) lives in its own module under `harness.plugins`. Installed,
the plugin is loaded by every pytest session of the environment, so these modules import nothing heavy
(no torch, no reference engine) and act only in a session that takes part in kvconform
(`harness.plugins.activation`).
"""

from __future__ import annotations

PLUGIN_MODULES = (
    "harness.plugins.activation",
    "harness.plugins.session_info",
    "harness.plugins.results",
    "harness.plugins.compact_reports",
    "harness.plugins.console",
    "harness.plugins.short_failures",
    "harness.plugins.config_matrix",
    "harness.plugins.allocator",
    "harness.plugins.connector",
    "harness.plugins.shard",
    "harness.plugins.collector_gc",
)


def pytest_addoption(parser, pluginmanager):
    """Register the concern plugins; pytest replays historic hooks such as this one for them."""
    for name in PLUGIN_MODULES:
        if not pluginmanager.has_plugin(name):
            pluginmanager.import_plugin(name)
    # Imported here, after import_plugin: pytest rewrites the asserts of a plugin module it imports first.
    from harness.plugins.activation import remember_options

    remember_options(parser)
