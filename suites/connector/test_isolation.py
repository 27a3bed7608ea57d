"""Spec 4.2, keys: C30 key-isolation, C34 tp-rank-shards, C36 determinism across processes."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from harness import outcomes
from harness.key_components import KeyLeak
from reference_impl.kv_cache.request import LoRARequest
from reference_impl.kv_cache.kv_cache_interface import SlidingWindowSpec
from reference_impl.engine.content import model_salt
from harness.targets.connector.profile import not_applicable
from suites.connector.context import expect, expect_no_read_errors, prompt
from suites.connector import processes
from suites.connector.oracles import rank_whose_kv
from suites.connector.runner import ConnectorHookError


# One prompt per key component C30 isolates, stored under one value of it and asked under others (the rest of the
# key the same): a hit can only come from that prompt's objects, so it names the component the keys ignore.
KEY_PROBES = (  # (component, what the prompt is stored with, what it is asked with)
    ("cache_salt", {"cache_salt": "tenant-a"}, ({"cache_salt": "tenant-b"}, {})),
    ("lora", {"lora_request": LoRARequest("adapter-a", 1)}, ({"lora_request": LoRARequest("adapter-b", 2)}, {})),
)


@pytest.mark.kv_check("C30")
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa", "fa+swa+mamba"])
def test_c30_key_isolation(ctx, preset):
    """Another cache salt or LoRA gets no hit; losing one group's object never changes another group's."""
    engine = ctx.engine()
    stored = {}
    for index, (component, kwargs, _) in enumerate(KEY_PROBES):
        stored[component] = prompt(30 + index, 800)
        ctx.run(engine, stored[component], **kwargs)
    ctx.forget_local_cache(engine)
    leaks = []
    for component, kwargs, asks in KEY_PROBES:
        for ask in asks:
            request = engine.make_request(stored[component] + [1], **ask)
            engine.add_request(request)  # vLLM looks a request up only after add_request (on_new_request)
            n, _ = ctx.ask(engine, request)
            engine.abort_request(request.request_id)
            if n:
                leaks.append(KeyLeak(ctx.key_components(engine, **kwargs), ctx.key_components(engine, request),
                                     f"hit {n} tokens on objects stored under another key"))
                break  # one leak names the component; the other asks would say the same
    if leaks:
        ctx.fail_key_leaks(leaks)  # every component the keys ignore, each with what was stored and asked
    tokens = stored["cache_salt"]
    same = engine.make_request(tokens + [1], cache_salt="tenant-a")
    engine.add_request(same)
    n, _ = ctx.ask(engine, same)
    expect(n and n > 0, "the same salt must hit (the isolation test is otherwise vacuous)", cause="isolation-vacuous")
    engine.abort_request(same.request_id)
    evict = ctx.optional_backdoor(engine.connector, "kvconform_evict")
    swa = [g for g, grp in enumerate(engine.kv_cache_config.kv_cache_groups)
           if isinstance(grp.kv_cache_spec, SlidingWindowSpec)]
    chunk = ctx.chunk_size(engine) if evict is not None else None
    if evict is not None and swa and chunk:
        probe = engine.make_request(tokens + [1], cache_salt="tenant-a")
        for j in range(len(tokens) // chunk):
            evict(probe, swa[0], j)
        engine.add_request(probe)
        after, _ = ctx.ask(engine, probe)
        expect(not after, f"hit {after} with every sliding-window object gone: the hit does not depend on the "
                          "sliding-window group's own objects (its objects alias another group's, or the hit rule "
                          "ignores the group, see C07)")
        engine.abort_request(probe.request_id)


# A production store is shared by deployments: (what differs, writer's (preset, TP), reader's (preset, TP), whether
# the two deployments are two models). Each pair runs both ways round.
DEPLOYMENTS = {
    "model": ("another model name", ("fa_only", 1), ("fa_only", 1), True),
    "dtype": ("another KV dtype (float16 / bfloat16)", ("fa_only", 1), ("fa_only@bf16", 1), False),
    "tp": ("another tensor-parallel size (1 / 2, so other ranks)", ("fa_only", 1), ("fa_only", 2), False),
}


def _two_model_names(ctx) -> tuple[str, str]:
    """Two model names on the check's store whose KV differs (content salts differ): `<store>/a` and `<store>/b`.

    The salt hashes the whole name, the store's included, so in about one run in 113 `b` shares `a`'s salt and the
    next letter that does not is taken; that letter depends on the run's store like the store's name itself, so the
    evidence names the second model `<store>/b` on every run (`CheckContext.model_names_shown`)."""
    base = f"kvconform/deployments/{ctx.store_name}"
    first = f"{base}/a"
    second = next(f"{base}/{s}" for s in "bcdefgh" if model_salt(f"{base}/{s}") != model_salt(first))
    ctx.model_names_shown[second] = f"{base}/b"
    return first, second


@pytest.mark.kv_check("C30")
@pytest.mark.parametrize("variant", list(DEPLOYMENTS))
def test_c30_store_shared_across_deployments(ctx, variant):
    """One store, two deployments that differ in one respect (model name, KV dtype, TP size): a prompt one of
    them stored is looked up and run by the other, both ways round. A miss is fine; whatever is loaded must be
    the reader's own KV (the reader's every read matches its oracle, which differs with the model, dtype and
    rank). Each deployment must hit its own objects (otherwise the check has nothing to judge)."""
    what, writer, reader, two_models = DEPLOYMENTS[variant]
    if two_models:
        names = _two_model_names(ctx)
    else:
        names = (f"kvconform/deployments/{ctx.store_name}",) * 2
    ctx.not_applicable_on_engine_owned_store(f"no other deployment ({what}) can read what one stored")
    sides = [(writer, names[0]), (reader, names[1])]
    for direction, ((w_preset, w_tp), w_model), ((r_preset, r_tp), r_model) in (
            (0, sides[0], sides[1]), (1, sides[1], sides[0])):
        tokens = prompt(3000 + 10 * direction + len(variant), 700)
        writer_engine = ctx.engine(w_preset, tp=w_tp, model=w_model)
        ctx.run(writer_engine, tokens)
        own = ctx.lookup(ctx.engine(w_preset, tp=w_tp, model=w_model), tokens + [1])
        if not own:
            outcomes.inconclusive(f"the connector offered no hit for a prompt the same deployment had just stored "
                                  f"({w_preset}, TP={w_tp}), so sharing the store across {what} cannot be judged")
        other = ctx.engine(r_preset, tp=r_tp, model=r_model)
        # Whatever the reader loads of this prompt only the writer stored: wrong KV, or a load that cannot even
        # copy it, is the writer's objects served under the reader's key.
        request = other.add_request(other.make_request(tokens + [1], max_tokens=2))
        scene = f" — while: {r_preset} at TP={r_tp} ran a prompt {w_preset} at TP={w_tp} stored: hit {{}} tokens"
        symptom = None
        try:
            other.run_until_done()
        except ConnectorHookError as exc:
            if not request.num_external_computed_tokens:
                raise
            symptom = f"{exc}{scene.format(request.num_external_computed_tokens)}"
        errors = other.read_errors if other.content_judged else []
        if symptom is None and errors:
            symptom = (f"the model read wrong KV{scene.format(request.num_external_computed_tokens)}, "
                       f"{len(errors)} wrong reads, first: {errors[0]}")
        if symptom is not None:
            ctx.fail_key_leaks([KeyLeak(ctx.key_components(writer_engine), ctx.key_components(other), symptom)])


@pytest.mark.kv_check("C34")
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa"])
def test_c34_tp_rank_shards(ctx, preset):
    """With TP=2 (one KV head per rank), each rank gets back its own shard."""
    engine = ctx.engine(tp=2)
    reload = ctx.store_then_reload(engine, prompt(34, 700))
    hit = reload.num_external_computed_tokens
    expect(hit > 0, "no hit with TP=2 after storing", cause="no-hit")
    if engine.content_judged:
        for worker in engine.workers:
            for error in worker.read_errors[:1]:
                source = rank_whose_kv(engine, worker, error, reload.all_token_ids)
                if source is not None:  # the bytes are another rank's shard: the keys do not tell the ranks apart
                    ctx.fail_key_leaks([KeyLeak(
                        ctx.key_components(engine, rank=source), ctx.key_components(engine, rank=worker.rank),
                        f"the model read wrong KV after a hit of {hit} tokens: rank {worker.rank} read rank {source}'s "
                        f"shard ({error.layer}, token position {error.position}, block {error.block})")])
    expect_no_read_errors(engine, "TP=2 reload")


def _in_process(ctx, preset: str, extra: dict, mode: str, hash_seed: str, prompt_seed: int) -> subprocess.Popen:
    """A fresh interpreter with PYTHONHASHSEED=`hash_seed` that stores prompt(`prompt_seed`), or looks it up."""
    return processes.send(processes.fresh_interpreter(hash_seed), processes.job(ctx, preset, extra, mode, prompt_seed))


CHILD_TIMEOUT_S = 240  # within C36's time limit (its time_factor, harness.connector_checks); a vLLM import alone can take a minute


def _answer(proc: subprocess.Popen | processes.ForkedJob, what: str) -> dict:
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        # The process did not answer: nothing about the connector's keys was learnt (a loaded machine).
        outcomes.inconclusive(f"{what} did not answer within {CHILD_TIMEOUT_S} s")
    expect(proc.returncode == 0, f"{what} failed: {(err.strip().splitlines() or ['?'])[-1]}")
    return json.loads(out.strip().splitlines()[-1])


def _paths_in(extra) -> list[str]:
    """Every string of the extra config (at any depth) that names an existing folder or file: where a store that
    outlives its process keeps its objects (a disk tier's folder)."""
    if isinstance(extra, dict):
        return [p for value in extra.values() for p in _paths_in(value)]
    if isinstance(extra, list):
        return [p for value in extra for p in _paths_in(value)]
    return [extra] if isinstance(extra, str) and os.path.isabs(extra) and os.path.exists(extra) else []


def _files(paths: list[str]) -> dict[str, int]:
    """path -> modification time (ns) of every file under `paths`."""
    found = {}
    for root in paths:
        walk = [(root, [], [""])] if os.path.isfile(root) else os.walk(root)
        for folder, _, names in walk:
            for name in names:
                path = os.path.join(folder, name)
                try:
                    found[path] = os.stat(path).st_mtime_ns
                except OSError:  # removed meanwhile (an eviction)
                    pass
    return found


@pytest.mark.kv_check("C36")
def test_c36_determinism_across_processes(ctx, tmp_path):
    """A prompt stored in this process must hit the same in another process with PYTHONHASHSEED=4242 (a child of
    a PYTHONHASHSEED=4242 server, `suites.connector.processes`, in which the connector is first built). When it
    does not, two more processes (fresh interpreters) tell salted keys from a store that does not outlive its
    process: one stores with PYTHONHASHSEED=1, another with the same seed looks up. A hit there is salted keys; a
    miss although the storing process left objects behind (files it wrote under a path of the extra config, e.g. a
    disk tier's folder) is keys that differ from process to process whatever the seed (a random salt, an id()).
    Only a store that left nothing behind may not outlive its process: then the `kvconform_object_keys` backdoor
    (keys of one prompt under both seeds) decides, if present; without it the check is N/A for a profile that
    declares such a store (`store_scope` "process") and decided nothing otherwise."""
    preset = "fa+swa" if ctx.is_hma else "fa_only"
    extra = ctx.extra_config(disk_path=str(tmp_path / "disk"))  # built-ins: a disk tier other processes read
    engine = ctx.engine(preset, extra=extra)
    tokens = prompt(36, 700)
    ctx.run(engine, tokens)
    here = ctx.lookup(ctx.reader(engine) if ctx.profile.engine_owned_store else ctx.engine(preset, extra=extra),
                      tokens + [1])
    expect(here > 0, "the prompt just stored does not hit on a fresh engine in the same process"
           if not ctx.profile.engine_owned_store else "the prompt just stored does not hit on the engine that stored it")
    ctx.not_applicable_on_engine_owned_store("no other process can read it (keys across processes cannot be compared)")
    # A child of this process's PYTHONHASHSEED=4242 server (suites.connector.processes): the connectors of one run
    # share that interpreter's start, and each gets a process of its own, where its connector is first built.
    other = _answer(processes.forked("4242", processes.job(ctx, preset, extra, "lookup", 36)),
                    "the lookup process (PYTHONHASHSEED=4242)")
    if other["hit"]:
        expect(other["hit"] == here, f"keys depend on the process: a prompt that hits {here} tokens here hits "
                                     f"{other['hit']} in a process with PYTHONHASHSEED=4242")
        return
    # Only a miss needs the two processes that tell the cases apart (each costs an interpreter and torch's
    # import). The lookup starts once the storing process has exited: a store may write its tier when its
    # process ends, and a lookup racing that exit would read a salted-keys bug as "does not outlive its process".
    # The lookup process's interpreter starts beside the storing one (its imports, mostly torch's, overlap the
    # store); it is sent its job only after the storing process has exited.
    looking, same = processes.fresh_interpreter("1"), None
    try:
        before = _files(_paths_in(extra))
        _answer(_in_process(ctx, preset, extra, "store", "1", 37), "the storing process (PYTHONHASHSEED=1)")
        after = _files(_paths_in(extra))
        left = sorted(path for path, mtime in after.items() if before.get(path) != mtime)
        same = _answer(processes.send(looking, processes.job(ctx, preset, extra, "lookup", 37)), "the lookup process")
    finally:
        if same is None and looking.poll() is None:  # the store failed (or the lookup timed out: killed already)
            looking.kill()
            looking.communicate()
    expect(not same["hit"], f"keys depend on the process: a prompt that hits {here} tokens here hits nothing in a "
                            "process with PYTHONHASHSEED=4242, while two processes with the same seed share their "
                            "objects (unseeded hash()?)")
    expect(not left, f"keys depend on the process: the storing process (PYTHONHASHSEED=1) left {len(left)} file(s) "
                     f"behind (first: {left[:1]}), yet a new process with the same seed finds nothing of that prompt "
                     f"(and one with PYTHONHASHSEED=4242 nothing of a prompt that hits {here} tokens here): keys that "
                     "differ from process to process (a random salt, an id()?), or a tier whose objects a new "
                     "process never finds again")
    if other.get("keys") is not None and same.get("keys") is not None:
        expect(other["keys"] and other["keys"] == same["keys"],
               f"keys differ across processes (PYTHONHASHSEED 4242 vs 1): {other['keys'][:1]} vs {same['keys'][:1]}")
        return
    paths = ", ".join(_paths_in(extra)) or "none"
    why = ("the store did not outlive its process (a second process with the same PYTHONHASHSEED found nothing, and "
           f"the storing process left no file under the extra config's paths: {paths}) and there is no "
           "kvconform_object_keys() backdoor, so keys across processes cannot be compared")
    if ctx.profile.store_scope == "process":
        not_applicable(f"the connector's store lives and dies with its process (profile store_scope 'process'): {why}")
    outcomes.inconclusive(f"{why}; a connector whose store is memory only declares it (store_scope = "
                          "\"process\" on its ConnectorUnderTest, or \"kvconform\": {\"store_scope\": "
                          "\"process\"}), one with a disk or server tier configures it")
