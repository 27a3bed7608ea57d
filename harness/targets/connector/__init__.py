"""The connector under test: how it is selected, loaded, profiled and probed (the reference form), and its vLLM form
(`vllm:Name`: the adapter around vLLM's own class, reviewed facts, CPU stand-ins, release layouts, LMCache's server)."""
