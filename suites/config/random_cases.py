"""Random configurations of one era's matrix dimensions, and how a target's answers to them differ from the era's.

    python -m suites.config.random_cases --era v0.33 --count 200 --seed 1            # the cases, as JSON
    python -m suites.config.random_cases --era v0.33 --count 200 --seed 1 --target vllm [--out diff.json]
    python -m suites.config.random_cases --era v0.22 --trees --target vllm          # every small connector tree

The matrix (`matrix.py`) pairs every two dimension values at least once; a new release also breaks rules on
combinations it never builds: several features at once, speculative methods beside chunked attention,
MultiConnector trees of any depth with children lacking `kv_role`. A case here draws each dimension at random
(seeded, so a run is repeatable): flag, platform, each model and cache option present or absent on its own draw
(the offloading size and backend, chunked attention, a speculator, KV events, each environment variable the
release reads), a connector of the era's matrix (sometimes without kv_role) or a random connector tree, the
stage; every 8th case gives one option alone, the era's options in turn (`suites/config/options.py`), so
vLLM's default for every other option runs. With `--target`, every case is answered
by the reference resolver at the era's rules and by the target (`vllm`: the installed vLLM, judged as the era
with KVCONFORM_VLLM_JUDGE_ERA when it is a newer release), and the cases whose outcomes differ are printed,
grouped by (era's outcome, target's outcome); cases the era leaves unknown (its answer depends on what it cannot
see, such as an installed package's version) are listed apart and do not count. Exit status: 0 none differ, 1
some differ, 2 bad arguments, 4 the target cannot be loaded.

`--trees` replaces the random draws by every MultiConnector of one or two children from `TREE_CHILDREN`, with
every flag at both stages (1,260 cases an era; 1,440 for v0.34, whose vLLM reads a child's extra config): vLLM
checks a child's kv_role, looks its class up, asks its HMA support and builds nested MultiConnectors child by
child, and stops at different points in different releases, so which of two children's faults is reported is a matter of order that random draws reach only by luck.
"""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from typing import Any

from harness.eras import ERA_IDS
from reference_impl.vocabulary import CASE_DEFAULTS, CASE_KEYS, FLAGS, MATRIX_STAGES, PLATFORMS, UNREGISTERED_CONNECTOR
from suites.config.matrix import (CUSTOM_METHOD, FEATURES, MODULE_PATH, connector_child,
                                  connectors_for, example_connector, unregistered_for)
from suites.config.options import PREREQUISITES, options_of
from suites.config.oracle import CHUNKED_ENV, SIMPLE_OFFLOAD_ENV, USE_V1_ENV
from suites.config.outcomes import outcome_mismatches, summarize
from suites.config.tables import era_table

# Each option is drawn on its own (`suites/config/options.py`): present or absent independently of the others,
# so vLLM's default for an option left out runs beside any other (the offloading size without a backend, a
# backend without a size, a speculator without chunked attention, an environment variable without what it
# modifies). HiSparse stays alone, as in the matrix: it needs a sparse-attention model of its own, which the vllm
# target builds only for a case without other model features.
# A simple key of the schema without a probability here (a new one, `CaseKey`) is drawn at `DECLARED_PROBABILITY`,
# after the others, so the draws of the keys above stay as they were.
DRAWN_APART = {"hisparse": "needs a sparse-attention model of its own: drawn alone (FEATURES['hisparse'])"}
DECLARED_PROBABILITY = 0.2
OPTION_PROBABILITY = {"kv_events": 0.3, "attention_chunk_size": 0.35, "speculative_method": 0.2,
                      "kv_offloading_backend": 0.3, "kv_offloading_size": 0.3, CHUNKED_ENV: 0.25,
                      SIMPLE_OFFLOAD_ENV: 0.2, USE_V1_ENV: 0.2}
OPTION_PROBABILITY.update({key: DECLARED_PROBABILITY for key, spec in CASE_KEYS.items()
                           if spec.simple and key not in OPTION_PROBABILITY and key not in DRAWN_APART})
METHODS = ("eagle", "eagle3", "mtp", "ngram")
ENV_VALUES = ("0", "1")
#: Every this many cases, one gives a single option alone (with what it is read together with), the options of
#: the era in turn: a case whose every other option is vLLM's default.
ALONE_EVERY = 8
ROLES = ("kv_both", "kv_producer", "kv_consumer", None)
# Dimensions vLLM 0.34 reads, drawn only for an era whose table has them (older eras draw as before): a
# connector's kv_connector_extra_config (Nixl's transfer_mode, HiSparse's host_pool_gib, good and bad), custom
# speculative methods, speculative method names (built in or unknown) and module-path children.
TRANSFER_MODES = ("pull", "push", "sideways", "PULL", None, 1)
HOST_POOLS = (4, 0.5, 0, -1, "2", "abc", None, [1])
SPECULATIVE_NAMES = ("eagle", "eagle3", "mtp", "ngram", "draft_model", "no_such_method")
MODULE_CHILDREN = ("ExternalHMAConnector", "ExternalPlainConnector", "LegacyTwoArgConnector", "NoSuchClass")


def _tree(rng: random.Random, names: list[str], depth: int) -> list[dict[str, Any]]:
    """MultiConnector children: registered names, nested MultiConnectors, sometimes without kv_role."""
    children = []
    for _ in range(rng.randint(0, 3)):
        nested = depth > 0 and rng.random() < 0.25
        child: dict[str, Any] = {"kv_connector": "MultiConnector" if nested else rng.choice(names)}
        role = rng.choice(ROLES) if rng.random() < 0.3 else "kv_both"
        if role is not None:
            child["kv_role"] = role
        if nested:
            child["children"] = _tree(rng, names, depth - 1)
        children.append(child)
    return children


# The kinds of child `connector_trees` combines: a connector that supports HMA where the era says so (NixlConnector,
# from 0.18), one that never does (vLLM's example connector, under the era's name for it), a name no release
# registers, each of the first two without kv_role, and MultiConnector children: HMA-capable, not, without a
# "connectors" list, with an empty one, with an unknown child, with a child lacking kv_role. Every era registers
# NixlConnector and the example connector.
def tree_children(example: str = "ExampleConnector") -> dict[str, dict[str, Any]]:
    """The kinds of child, by label, with `example` as the example connector's registered name."""
    return {
        "nixl": connector_child("NixlConnector"),
        "example": connector_child(example),
        "unknown": connector_child(UNREGISTERED_CONNECTOR),
        "example-no-role": connector_child(example, role=None),
        "nixl-no-role": connector_child("NixlConnector", role=None),
        "multi[nixl]": connector_child("MultiConnector", [connector_child("NixlConnector")]),
        "multi[example]": connector_child("MultiConnector", [connector_child(example)]),
        "multi-without-list": connector_child("MultiConnector"),
        "multi[]": connector_child("MultiConnector", []),
        "multi[unknown]": connector_child("MultiConnector", [connector_child(UNREGISTERED_CONNECTOR)]),
        "multi[example-no-role]": connector_child("MultiConnector", [connector_child(example, role=None)]),
        # by module path: a class that declares HMA, a two-argument constructor, a class the module lacks
        **{label: {**connector_child(name), "kv_connector_module_path": MODULE_PATH}
           for label, name in (("path-hma", "ExternalHMAConnector"), ("path-two-arg", "LegacyTwoArgConnector"),
                               ("path-no-class", "NoSuchClass"))},
    }


TREE_CHILDREN: dict[str, dict[str, Any]] = tree_children()


# A child with a kv_connector_extra_config, where the release reads one (0.34: NixlConnector's transfer_mode): so
# a child's extra config is drawn present and absent (`suites/config/options.py`).
EXTRA_CONFIG_TREE_CHILDREN: dict[str, dict[str, Any]] = {
    "nixl-push": connector_child("NixlConnector", extra={"transfer_mode": "push"}),
}


def era_tree_children(era: str) -> dict[str, dict[str, Any]]:
    """The kinds of child `connector_trees` combines in `era`: `tree_children` with the era's example connector,
    and a child with an extra config where the release reads it."""
    kinds = tree_children(example_connector(era))
    if "kv_connector_extra_config" in options_of(era):
        kinds.update(EXTRA_CONFIG_TREE_CHILDREN)
    return kinds


def connector_trees(era: str) -> list[dict[str, Any]]:
    """Every MultiConnector of one or two children of `era_tree_children(era)`, with every flag, at both stages, on
    a platform that supports HMA: the same list for the same era."""
    kinds = era_tree_children(era)
    shapes = [[a] for a in kinds] + [[a, b] for a in kinds for b in kinds]
    cases = []
    for shape in shapes:
        for flag_label, flag in FLAGS.items():
            for stage in MATRIX_STAGES.values():
                cases.append({
                    "id": f"{era}-tree-{'+'.join(shape)}-{flag_label}-{stage}", "profile": era, "flag": flag,
                    "platform": "cuda", "stage": stage, "kv_connector": "MultiConnector", "kv_role": "kv_both",
                    "multi_connector_children": json.loads(json.dumps([kinds[a] for a in shape])),
                })
    return cases


def random_cases(era: str, count: int, seed: int) -> list[dict[str, Any]]:
    """`count` cases of `era`'s dimensions, the same for the same (era, count, seed)."""
    rng = random.Random(f"{era}/{seed}")
    connectors = {**connectors_for(era), **unregistered_for(era)}
    labels = sorted(connectors)
    # HiSparseConnector switches HiSparse on, which stays alone (above); the matrix has its own trees.
    names = sorted(set(era_table(era)["connectors"]) - {"HiSparseConnector"})
    options = options_of(era)
    cases = []
    for index in range(count):
        case: dict[str, Any] = {
            "id": f"{era}-random{seed}-{index}",
            "profile": era,
            "flag": FLAGS[rng.choice(list(FLAGS))],
            "platform": rng.choice(PLATFORMS),
            "stage": rng.choice(list(MATRIX_STAGES.values())),
        }
        if index % ALONE_EVERY == ALONE_EVERY - 1:
            option = options[(index // ALONE_EVERY) % len(options)]
            case["id"] += f"-alone-{option}"
            case.update(_alone(rng, era, option, names))
            cases.append(case)
            continue
        # HiSparse only where the release has it: before it a case cannot ask for it (vLLM has no such option),
        # so the era's "unknown" and whatever the target builds without it are no difference of behaviour.
        if rng.random() < 0.1 and "hisparse" in options:
            case.update(FEATURES["hisparse"])
        else:
            _draw_options(rng, case, options)
        if rng.random() < 0.25:
            case.update({"kv_connector": "MultiConnector", "kv_role": "kv_both",
                         "multi_connector_children": _tree(rng, names, depth=2)})
        else:
            case.update(json.loads(json.dumps(connectors[rng.choice(labels)])))
            if case.get("kv_connector") and rng.random() < 0.15:
                case["kv_role"] = rng.choice(ROLES[1:] + (None,))
        if _reads_extras(era):
            _draw_extras(random.Random(f"{era}/{seed}/{index}"), case)
        cases.append(case)
    return cases


def _draw_options(rng: random.Random, case: dict[str, Any], options: tuple[str, ...]) -> None:
    """The model and cache options, each present or absent on its own draw (an option the era does not read is
    never drawn)."""
    env: dict[str, str] = {}
    for option, probability in OPTION_PROBABILITY.items():
        key = option if option in CASE_DEFAULTS else f"env.{option}"
        if key not in options or rng.random() >= probability:
            continue
        if key.startswith("env."):
            env[option] = rng.choice(ENV_VALUES)
        else:
            case[option] = _value(rng, option)
    if env:
        case["env"] = env


def _value(rng: random.Random, option: str) -> Any:
    """A value of a model or cache option: a speculative method, or a simple key's from its record (one of its
    choices at random, else its `given()` value)."""
    if option == "speculative_method":
        return rng.choice(METHODS)
    spec = CASE_KEYS[option]
    return rng.choice(spec.choices) if spec.kind == "choice" else spec.given()


def _alone(rng: random.Random, era: str, option: str, names: list[str]) -> dict[str, Any]:
    """Case fields giving `option` alone, with only what it is read together with (`options.PREREQUISITES`): the
    flag absent unless it is the option."""
    fields: dict[str, Any] = {"flag": rng.choice([True, False])} if option == "flag" else {"flag": None}
    if option.startswith("env."):
        name = option.removeprefix("env.")
        fields["env"] = {name: rng.choice(ENV_VALUES)}
        for needed in PREREQUISITES.get(option, ()):
            fields[needed] = _value(rng, needed)
        return fields
    connector = {"kv_connector": rng.choice(names), "kv_role": "kv_both"}
    if option == "kv_connector":
        fields.update({**connector, "kv_role": None})
    elif option == "kv_role":
        fields.update({**connector, "kv_role": rng.choice(ROLES[:-1])})
    elif option == "kv_connector_module_path":
        fields.update({"kv_connector": rng.choice(MODULE_CHILDREN), "kv_role": "kv_both",
                       "kv_connector_module_path": MODULE_PATH})
    elif option == "multi_connector_children":
        fields.update({"kv_connector": "MultiConnector", "kv_role": "kv_both",
                       "multi_connector_children": _tree(rng, names, depth=1)})
    elif option == "kv_connector_extra_config":
        table = era_table(era)
        shapes = [("NixlConnector", {"transfer_mode": rng.choice(TRANSFER_MODES)})] if table["factory"]["nixl_transfer_mode"] else []
        if table["hisparse"]["host_pool_required"]:
            shapes.append(("HiSparseConnector", {"host_pool_gib": rng.choice(HOST_POOLS)}))
        name, extra = rng.choice(shapes)
        fields.update({"kv_connector": name, "kv_role": "kv_both", "kv_connector_extra_config": extra})
    elif option == "hisparse":
        fields.update(FEATURES["hisparse"])
    elif option != "flag":
        fields[option] = _value(rng, option)
    return fields


def _reads_extras(era: str) -> bool:
    table = era_table(era)
    return bool(table["factory"]["nixl_transfer_mode"] or table["hisparse"]["host_pool_required"]
                or table["block"]["custom_speculative_methods"])


def _pool_child(rng: random.Random) -> dict[str, Any]:
    child: dict[str, Any] = {"kv_connector": "HiSparseConnector", "kv_role": "kv_both"}
    if rng.random() < 0.85:
        child["kv_connector_extra_config"] = {"host_pool_gib": rng.choice(HOST_POOLS)}
    return child


def _draw_extras(rng: random.Random, case: dict[str, Any]) -> None:
    """0.34's dimensions on top of a drawn case (its own random stream, so the base draws stay the same)."""
    roll = rng.random()
    if roll < 0.15:  # a Nixl connector in a transfer mode, at the top or as a child
        extra = {"transfer_mode": rng.choice(TRANSFER_MODES)} if rng.random() < 0.8 else {}
        nixl = {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_connector_extra_config": extra}
        if rng.random() < 0.5:
            case.update({"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_connector_extra_config": extra,
                         "kv_connector_module_path": None, "multi_connector_children": None})
        else:
            case.update({"kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_module_path": None,
                         "multi_connector_children": [nixl, *(case.get("multi_connector_children") or [])][:3]})
    elif roll < 0.3:  # HiSparse through its connector: alone, as a child, or twice
        shape = rng.choice(["top", "child", "two"])
        case.update({"kv_connector_module_path": None, "kv_role": "kv_both"})
        if shape == "top":
            pool = _pool_child(rng)
            case.update({"kv_connector": "HiSparseConnector", "multi_connector_children": None,
                         "kv_connector_extra_config": pool.get("kv_connector_extra_config")})
        else:
            children = [_pool_child(rng)] + ([_pool_child(rng)] if shape == "two" else
                                             [{"kv_connector": "NixlConnector", "kv_role": "kv_both"}])
            case.update({"kv_connector": "MultiConnector", "multi_connector_children": children})
    elif roll < 0.38 and case.get("multi_connector_children") is not None:  # a module-path child
        child = {"kv_connector": rng.choice(MODULE_CHILDREN), "kv_role": "kv_both",
                 "kv_connector_module_path": "suites.config.external_connectors"}
        case["multi_connector_children"] = [*case["multi_connector_children"], child]
    method = rng.random()
    if method < 0.2:
        case["speculative_method"] = {"name": CUSTOM_METHOD, "uses_target_hidden_states": rng.random() < 0.5}
    elif method < 0.35:
        case["speculative_method"] = rng.choice(SPECULATIVE_NAMES)


def differences(cases: list[dict[str, Any]], reference, target) -> tuple[list[dict[str, Any]], int]:
    """(the cases whose outcomes differ, each with both outcomes and the differences; how many cases the
    target could not evaluate here). A case the target answers `unknown` is not a difference of behaviour."""
    differing, unknown = [], 0
    for case in cases:
        expected, actual = reference(case), target(case)
        if actual.get("unknown") and not expected.get("unknown"):
            unknown += 1
            continue
        problems = outcome_mismatches(expected, actual)
        if problems:
            differing.append({"case": case, "era": expected, "target": actual, "differences": problems})
    return differing, unknown


def split_abstentions(differing: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the differences where the era answered, those where it abstained). An era "unknown" (an LMCache
    connector's HMA support when the lmcache package is installed here depends on its version) is no wrong
    answer but a gap: listed apart, it does not fail the run."""
    return ([d for d in differing if not d["era"].get("unknown")], [d for d in differing if d["era"].get("unknown")])


def grouped_lines(differing: list[dict[str, Any]], max_lines: int = 30) -> list[str]:
    """One line per (era's outcome -> target's outcome), most frequent first, with the first case's id."""
    def key(d):  # a long message (vLLM lists its whole model registry) is cut to keep one line per group
        return tuple(text if len(text) <= 160 else text[:157] + "..." for text in (summarize(d["era"]), summarize(d["target"])))

    counts = Counter(key(d) for d in differing)
    first = {}
    for d in differing:
        first.setdefault(key(d), d["case"]["id"])
    lines = [f"{n} cases: era `{want}`, target `{got}` — first: {first[(want, got)]}"
             for (want, got), n in counts.most_common(max_lines)]
    if len(counts) > max_lines:
        lines.append(f"… and {len(counts) - max_lines} more groups")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Command line: print the cases, or compare a target's answers with the era's."""
    from harness.cli import _Parser
    from harness.errors import EXIT_TARGET, UsageError

    parser = _Parser(prog="python -m suites.config.random_cases", description=__doc__.split("\n\n")[1])
    parser.add_argument("--era", required=True, help=f"the era whose dimensions to draw from: {', '.join(ERA_IDS)}")
    parser.add_argument("--count", type=int, help="how many cases (default 200)")
    parser.add_argument("--seed", type=int, help="the random seed (default 1)")
    parser.add_argument("--target", help="compare with this target: vllm (the installed vLLM)")
    parser.add_argument("--out", help="with --target: write the differing cases, both outcomes each, to this JSON file")
    parser.add_argument("--trees", action="store_true",
                        help="every MultiConnector of one or two children of fixed kinds (1,260 cases; v0.34: 1,440), "
                             "not random ones")
    try:
        args = parser.parse_args(argv)
        if args.era not in ERA_IDS:
            raise UsageError(f"--era: {args.era!r} is not an era id; accepted: {', '.join(ERA_IDS)}")
        if args.trees and (args.count is not None or args.seed is not None):
            given = "--count" if args.count is not None else "--seed"
            raise UsageError(f"{given}: --trees is a fixed list of cases; --count and --seed draw random ones")
        args.count = 200 if args.count is None else args.count
        args.seed = 1 if args.seed is None else args.seed
        if args.count < 1:
            raise UsageError(f"--count: {args.count} is not a positive number of cases")
        if args.target not in (None, "vllm"):
            raise UsageError(f"--target: {args.target!r} is not a known target; accepted: vllm")
        cases = connector_trees(args.era) if args.trees else random_cases(args.era, args.count, args.seed)
        if args.target is None:
            sys.stdout.write(json.dumps(cases, indent=1) + "\n")
            return 0
        from harness.targets.config.vllm_target import load_target
        from reference_impl.config.cases import resolve_case

        target = load_target()
    except UsageError as exc:
        print(f"random_cases: {exc}", file=sys.stderr)
        return exc.exit_code if exc.exit_code != EXIT_TARGET else EXIT_TARGET
    differing, unknown = differences(cases, resolve_case, target)
    differing, abstained = split_abstentions(differing)
    drawn = "connector trees" if args.trees else "random cases"
    seeded = "" if args.trees else f" (seed {args.seed})"
    print(f"{drawn} of era {args.era}{seeded} on {target.describe()}: {len(cases)} cases, "
          f"{len(differing)} differ from the era, {unknown} the target could not evaluate here, "
          f"{len(abstained)} the era leaves unknown where the target answers")
    for line in grouped_lines(differing):
        print("  " + line)
    for line in grouped_lines(abstained, max_lines=5):
        print("  (era unknown) " + line)
    if args.out:
        from harness.atomic_write import write_text_atomic

        write_text_atomic(args.out, json.dumps(differing + abstained, indent=1) + "\n")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
