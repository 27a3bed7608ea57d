"""What every correct engine should do, whatever the release: invariants, and the reviewed vLLM defects that break them.

An era table says what a release *does*; an invariant says what it *should* do. A release that violates one has
a reviewed defect (data, with vLLM's source lines); see docs/invariants.md.
"""
