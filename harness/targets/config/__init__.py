"""The config target's vLLM form: one matrix case evaluated by the installed vLLM's own configuration code, its
outcome schema and its platforms' capabilities (the reference form is `reference_impl.config`)."""
