"""Tests of the new-release tooling (harness/release, scripts/new-vllm-release.sh) that need no vLLM."""
