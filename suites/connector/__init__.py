"""Connector conformance suite: checks C01-C36 of the connector spec (section 4), run against the built-in
connectors or any `--kv-connector module:Class`."""
