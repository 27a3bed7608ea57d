"""Judging a new vLLM release: what changed on the HMA path, how its answers differ from the newest era,
and the draft era a person edits (`scripts/new-vllm-release.sh`, `docs/new-release.md`)."""
