"""Preflight: everything a run needs, checked before any episode, in a few seconds.

- every model a role uses answers the text and structured probe of `atelier model check`
  (`agents.models.model_probe.probe_models`; the scripted model passes at once; an unknown model name or an
  unreachable `api_base` fails here, not in every episode); a local model (`local/...`) gives one
  tiny completion in a process of its own (`atelier.agents.models.local_model.probe`: a crash, a hang
  or a llama.cpp built for instructions this machine does not enable fails here, by name);
- the keys those models and the web provider need are present;
- no model asked through chat completions asks for a background run (`extra = { background = true }`:
  only the Responses API, research_api's `api = "responses"`, runs and polls one);
- the benchmark's data files are present and match their registered sha256;
- every judge fits the benchmark: the cases carry the gold it needs;
- with epochs (`[run] epochs` > 1), no system-side role of a real model answers at temperature 0
  (its epochs would repeat one answer);
- with judge repeats (`[[judges]] repeats` > 1), no judge's main role of a real model answers at
  temperature 0 (its repeats would be identical);
- a web that is not started in-process (a SearXNG URL, a search API, a running sandbox) answers.

Problems are collected, never raised one by one: a failed preflight reports one line per problem
(`PreflightError`, exit 2) and nothing is started. `atelier run --no-preflight` skips it. Every
other command that calls a model runs the same checks of the models it calls (`check_models`):
`rescore` (its judges' roles, with the rest of this preflight), `simulate`, `meta-eval --feedback`;
`plan`, when it prices, the same checks of the models it prices (`check_priced_models`: keys and
probes; none for scripted or local models, so such a plan stays offline); `recipe check --model`
(or `--api-base`, or `--preflight`) this whole preflight; a plain `recipe check` checks keys
without calling anything.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from atelier.agents.models.ledger import Ledger, LedgerEntry, call_tags
from atelier.agents.models.settings import BACKGROUND_IS_RESPONSES, ROLE_FALLBACK, ModelSettings
from atelier.benchmarks.case import Case
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.errors import AtelierError, ConfigError
from atelier.runs.folder.recipe import Recipe

PROBE_TIMEOUT_S = 7.0  # per model, its text and structured probe together; models are probed concurrently
# a local model: loading it (~1 s) and one 4-token completion in a process of its own, on a loaded machine
LOCAL_PROBE_TIMEOUT_S = 30.0


class PreflightError(ConfigError):
    def __init__(
        self, problems: list[str], skip: str | None = "(`atelier run --no-preflight` skips these checks)"
    ) -> None:
        self.problems = problems
        count = f"{len(problems)} problem{'s' * (len(problems) != 1)}"
        super().__init__(
            f"preflight failed ({count}); nothing was started:\n  "
            + "\n  ".join(problems)
            + (f"\n{skip}" if skip else "")
        )


# ----------------------------------------------------------------------------- models


Uses = dict[str, tuple[ModelSettings, list[str]]]


def add_use(uses: Uses, settings: ModelSettings, where: str) -> None:
    """`settings`, used at `where`, among `uses` (one entry per distinct setting, all its places)."""
    key = settings.model_dump_json(exclude={"api_key"}) + str(settings.resolved_api_key())
    uses.setdefault(key, (settings, []))[1].append(where)


def model_uses(recipe: Recipe, *, probed: bool = False, roles: Collection[str] | None = None) -> Uses:
    """Each distinct model setting the recipe's roles use, with where it is set
    (`models.judge`, `systems[1].models.system`). `probed`: only those the preflight probes — not a
    system's own model for a role its pipeline asks only as a model that researches (a deep-research
    API: `PipelineSpec.research_roles`). `roles`: only those roles (a rescore calls the judges' alone)."""
    from atelier.graphs.pipelines import PIPELINES

    uses: Uses = {}
    for role, settings in recipe.role_models().items():
        if roles is None or role in roles:
            add_use(uses, settings, f"models.{role}")
    for i, system in enumerate(recipe.systems):
        researching = PIPELINES.get(system.pipeline).research_roles if probed else ()
        for role, settings in system.models.items():
            if role not in researching and (roles is None or role in roles):
                add_use(uses, settings, f"systems[{i}].models.{role}")
    return uses


def key_problems(settings: ModelSettings) -> list[str]:
    """Keys a model needs and does not have (litellm knows each provider's variables)."""
    if settings.is_scripted:
        return []
    if settings.api_key_env and settings.api_key is None and not settings.resolved_api_key():
        return [f"api_key_env names {settings.api_key_env}, which is not set"]
    if settings.resolved_api_key() or settings.placeholder_api_key():
        return []  # a key given, or an OpenAI-compatible server at an api_base, sent the placeholder
    import litellm

    litellm.suppress_debug_info = True  # no "Provider List: ..." banner for a model it cannot place
    try:  # at an api_base: a local server's provider (ollama, hosted_vllm, lm_studio) needs no key, a proxy's does
        check = litellm.validate_environment(model=settings.model, api_base=settings.api_base)
    except Exception:  # noqa: BLE001 - a model litellm cannot place is reported by the probe
        return []
    missing = check.get("missing_keys") or []
    return [f"needs {', '.join(missing)} (set it, or api_key_env / api_key in the recipe)"] if missing else []


def background_problem(settings: ModelSettings, where: str, asker: str, remedy: str) -> str | None:
    """Why `settings` (set at `where`), asked through chat completions by `asker`, cannot be: its
    `extra` asks for a background run, which only the Responses API has (a chat completion asked so
    comes back queued, with no answer, and nothing polls it); None when it does not ask for one."""
    if not settings.asks_background:
        return None
    return (
        f"{where} ({settings.model}): extra background = true, but {asker} asks it through chat completions, "
        f"which have no background run: {BACKGROUND_IS_RESPONSES}: {remedy}"
    )


def background_problems(recipe: Recipe, *, roles: Collection[str] | None = None) -> list[str]:
    """Each model the recipe asks through chat completions whose `extra` asks for a background run
    (`background_problem`), once per place it is set. Only a research pipeline's research role on
    a provider's own API (research_api's `api = "responses"`, or `"interactions"`, always in the
    background) takes one. `roles`: only those roles (a rescore calls the judges' alone)."""
    from atelier.graphs.pipelines import PIPELINES, pipeline_options

    dropped = "remove background from its extra"
    problems: dict[str, str] = {}
    recipe_roles = recipe.role_models()

    def place(role: str, own: Mapping[str, ModelSettings], prefix: str) -> tuple[ModelSettings, str]:
        """The settings `role` is asked with and where they are set: `own` (a system's models),
        else the recipe's, falling back as `settings_for_role` does."""
        if role in own:
            return own[role], f"{prefix}.models.{role}"
        name = next((n for n in (role, ROLE_FALLBACK.get(role)) if n is not None and n in recipe_roles), "system")
        return recipe_roles[name], f"models.{name}"

    def asked(role: str, own: Mapping[str, ModelSettings], prefix: str, asker: str, remedy: str = dropped) -> None:
        settings, where = place(role, own, prefix)
        problem = background_problem(settings, where, asker, remedy)
        if problem is not None:
            problems.setdefault(where, problem)

    for role in recipe.roles_used():
        if role != "system" and (roles is None or role in roles):
            asked(role, {}, "", f"the {role} role")
    for i, system in enumerate(recipe.systems):
        if system.pipeline not in PIPELINES.known():
            continue  # refused by name where the systems are checked
        spec = PIPELINES.get(system.pipeline)
        who = f"systems[{i}] ({system.name}, pipeline {system.pipeline}"
        if spec.research_roles:  # asked as a model that researches, on the API its options name
            api = getattr(pipeline_options(system.pipeline, system.pipeline_options), "api", "chat")
            for role in spec.research_roles:
                settings, _ = place(role, system.models, f"systems[{i}]")
                if (roles is None or role in roles) and (api == "chat" or settings.is_local):
                    asked(role, system.models, f"systems[{i}]", f"{who}, api = {api!r})", "set api = 'responses'")
            continue
        # a pipeline's own roles fall back to `system`: each one set is asked (as is `system`)
        asked_roles = {"system"} | {r for r in (*recipe.models, *system.models) if ROLE_FALLBACK.get(r) == "system"}
        for role in sorted(asked_roles):
            if roles is None or role in roles:
                asked(role, system.models, f"systems[{i}]", f"{who})")
    return list(problems.values())


async def model_problems(keys: Uses, probes: Uses, ledger: Ledger | None = None) -> list[str]:
    """The preflight of models: each of `keys` has its key; each of `probes` that has answers the
    probe of `atelier model check` — concurrently, each within PROBE_TIMEOUT_S. One line per
    problem, naming where the model is set."""
    problems: list[str] = []
    if any(not settings.is_scripted for settings, _ in keys.values()):
        import litellm  # noqa: F401 - before the probes' clocks start: importing it takes seconds, once
    unusable = set()
    for key, (settings, where) in keys.items():
        found = key_problems(settings)
        problems += [f"{', '.join(where)} ({settings.model}): {p}" for p in found]
        if found:
            unusable.add(key)
    asked = [(settings, where) for key, (settings, where) in probes.items() if key not in unusable]
    probed = await asyncio.gather(*(probe_problem(settings, where, ledger) for settings, where in asked))
    for (settings, where), problem in zip(asked, probed):
        if problem:
            base = f" at {settings.api_base}" if settings.api_base else ""
            problems.append(f"{', '.join(where)} ({settings.model}{base}): {problem}")
    return problems


async def check_models(
    models: Mapping[str, ModelSettings], *, probe: bool = True, ledger: Ledger | None = None
) -> None:
    """The run's preflight of models for a command that is no run (`rescore`, `simulate`, `meta-eval
    --feedback`, `plan`, `recipe check`): a PreflightError (exit 2, nothing started) naming each model
    (by its role or option in `models`) whose key is missing or — with `probe`, for a command about
    to call it — that does not answer the probe."""
    uses: Uses = {}
    for where, settings in models.items():
        add_use(uses, settings, where)
    background = [
        problem
        for settings, places in uses.values()
        if (problem := background_problem(settings, ", ".join(places), "the command", "remove it"))
    ]
    problems = await model_problems(uses, _without_background(uses) if probe else {}, ledger)
    if problems or background:
        raise PreflightError(problems + background, skip=None)


async def check_priced_models(recipe: Recipe, *, skip: str | None = None) -> bool:
    """The run's preflight of the models a command prices for `recipe` (`plan`): each one that is
    neither scripted nor local — the ones with a price — has its key and answers the probe, as
    `preflight` checks them (the same uses, the same probes), else a PreflightError (exit 2).
    False: no such model, nothing checked (a plan of scripted or local models stays offline)."""
    priced = {key: use for key, use in model_uses(recipe).items() if not (use[0].is_scripted or use[0].is_local)}
    if not priced:
        return False
    probes = {key: use for key, use in _without_background(model_uses(recipe, probed=True)).items() if key in priced}
    problems = await model_problems(priced, probes)
    if problems:
        raise PreflightError(problems, skip=skip)
    return True


def _without_background(uses: Uses) -> Uses:
    """The uses to probe: not a model asking for a background run, which chat probes cannot ask
    (refused by name where it is asked through chat; a Responses researcher is not probed)."""
    return {key: use for key, use in uses.items() if not use[0].asks_background}


async def probe_problem(
    settings: ModelSettings, where: list[str], ledger: Ledger | None = None, timeout_s: float = PROBE_TIMEOUT_S
) -> str | None:
    """None when the model answers `agents.models.model_probe.probe_models`' text and structured probe (the
    probe `atelier model check` runs), within `timeout_s` in all; else why not, in one line. The
    probe's calls go into `ledger` (they cost what any call costs)."""
    if settings.is_scripted:
        return None
    from atelier.agents.models.model_probe import probe_models

    if settings.is_local:
        # One tiny completion in a short-lived process of its own (a llama.cpp built for instructions
        # this machine does not enable dies there, not in the run); the run's server is not started.
        from atelier.agents.models.local_model import LocalModelError, parse_local_model
        from atelier.agents.models.local_model import probe as probe_local

        try:
            await asyncio.to_thread(probe_local, parse_local_model(settings.model), LOCAL_PROBE_TIMEOUT_S)
        except LocalModelError as exc:
            return str(exc)
        return None
    quick = settings.model_copy(update={"max_retries": 0, "timeout_s": min(settings.timeout_s, timeout_s)})
    try:
        [probe] = await asyncio.wait_for(probe_models({label: quick for label in where}), timeout_s)
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    if ledger is not None:
        ledger.entries.extend(probe.calls)
    failed = next(
        ((kind, step) for kind, step in (("text", probe.text), ("structured", probe.structured)) if not step.ok), None
    )
    if failed is None:
        return None
    text = " ".join(f"{failed[0]} probe: {failed[1].error}".split())
    return text if len(text) <= 240 else text[:239] + "…"


# ----------------------------------------------------------------------------- data, judges, web


def _checksum_memo() -> Path:
    from atelier.benchmarks.data_files import cache_dir

    return cache_dir() / "preflight-sha256.json"


def data_problems(benchmark: str) -> list[str]:
    """The benchmark's registered data files: present (or downloadable) and matching their sha256.
    A file's verdict is remembered by (path, size, mtime), so a second preflight reads nothing."""
    from atelier.benchmarks.data_files import locate, registered_file, verify_file
    from atelier.benchmarks.registry import get_benchmark

    memo_path = _checksum_memo()
    try:
        memo = json.loads(memo_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        memo = {}
    problems, changed = [], False
    for relpath in get_benchmark(benchmark).data_files:
        entry = registered_file(relpath)
        found = locate(relpath)
        if found is None:
            if entry is None or entry.url is None:
                problems.append(f"data {relpath}: not found, and it has no upstream URL to fetch it from")
            continue  # the loader fetches it and checks its sha256 before use
        path = found[0]
        if entry is None or entry.sha256 is None:
            continue
        stat = path.stat()
        stamp = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{entry.sha256}"
        if memo.get(stamp) == "ok":
            continue
        try:
            verify_file(entry, path)
        except AtelierError as exc:
            problems.append(f"data {relpath}: {exc}")
            continue
        memo[stamp], changed = "ok", True
    if changed:
        try:
            no_follow.make_folders(memo_path.parent)
            write_atomically(memo_path, json.dumps(memo, indent=0))
        except OSError:
            pass  # only a memo: the next preflight checks again
    return problems


def judge_problems(recipe: Recipe, cases: Sequence[Case]) -> list[str]:
    """Judges the benchmark's cases cannot feed (the judges' own declaration of what they need)."""
    from atelier.agents.judges.base import check_judge_fit, create_judge

    try:
        check_judge_fit(
            [create_judge(j) for j in recipe.judges], cases, recipe.benchmark.name, [s.name for s in recipe.systems]
        )
    except AtelierError as exc:
        return [line.strip() for line in str(exc).splitlines()[1:] if line.strip()] or [str(exc)]
    return []


def epoch_problems(recipe: Recipe) -> list[str]:
    """Epochs (`[run] epochs` > 1) over a real model answering at temperature 0: a real model's
    answer at temperature 0 barely depends on the seed, so its epochs would repeat one answer and
    report a spread of about nothing. Refused, for every system-side role the run uses that is
    not `scripted` (whose answers follow the seed at any temperature); judges are not concerned
    (their seeds stay, their variance is `repeats`'s)."""
    from atelier.runs.folder.resume import SYSTEM_SIDE

    if recipe.run.epochs <= 1:
        return []
    used = recipe.roles_used()
    problems: dict[str, str] = {}
    for i, system in enumerate(recipe.systems):
        merged = {**recipe.role_models(), **system.models}
        for role in SYSTEM_SIDE:
            if role not in merged or (role == "user_sim" and role not in used):
                continue
            settings = merged[role]
            if settings.is_scripted or settings.temperature > 0:
                continue
            where = f"systems[{i}].models.{role}" if role in system.models else f"models.{role}"
            problems.setdefault(
                where,
                f"{where} ({settings.model}) answers at temperature 0, so the {recipe.run.epochs} epochs would "
                "repeat one answer instead of measuring the system's spread: set its temperature > 0 (e.g. 0.7), "
                "or epochs = 1",
            )
    return list(problems.values())


def repeat_problems(recipe: Recipe) -> list[str]:
    """Judge repeats (`[[judges]] repeats` > 1) over a real model answering at temperature 0: each
    repeat asks with its own seed, but a real model decoding greedily gives the same judgment
    whatever the seed, so the repeats would be identical and the judge's variance would read 0.
    Refused for the judge's main (scoring) role; `scripted` follows the seed at any temperature."""
    from atelier.agents.judges.base import JUDGES
    from atelier.agents.models.settings import settings_for_role

    problems = []
    roles = recipe.role_models()
    for i, judge in enumerate(recipe.judges):
        repeats = int(judge.get("repeats") or 1)
        if repeats <= 1:
            continue
        role = JUDGES.get(str(judge.get("name"))).roles[0]
        settings = settings_for_role(roles, role)
        if settings.is_scripted or settings.temperature > 0:
            continue
        where = f"models.{role}" if role in recipe.models else "models.judge"
        problems.append(
            f"judges[{i}] ({judge.get('label') or judge.get('name')}): repeats = {repeats}, but its role {role} "
            f"({settings.model}, {where}) answers at temperature 0, so the {repeats} repeats would be identical "
            f"and the judge's own variance would read 0: set [{where}] temperature > 0 (e.g. 0.7), or repeats = 1"
        )
    return problems


def needs_web_probe(recipe: Recipe) -> bool:
    """A web the run uses (a system's pipeline searches, or a judge reads sources) and does not start
    itself (a SearXNG URL, a search API, a running sandbox)."""
    from atelier.agents.judges.base import create_judge
    from atelier.graphs.pipelines import PIPELINES

    used = any(PIPELINES.get(s.pipeline).uses_web for s in recipe.systems) or any(
        create_judge(j).uses_web for j in recipe.judges
    )
    web = recipe.web
    return used and web.mode != "replay" and (not web.uses_sandbox or bool(web.sandbox_settings.url))


async def web_problem(recipe: Recipe, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    from atelier.tools.web import build_web, check_web_config

    try:
        check_web_config(recipe.web)
    except AtelierError as exc:
        return f"web: {exc}"
    if not needs_web_probe(recipe):
        return None
    try:
        web = build_web(recipe.web.model_copy(update={"mode": "live"}))  # live: a cached answer proves nothing
        try:
            await asyncio.wait_for(web.search("weather", 1), timeout_s)
        finally:
            await web.aclose()
    except TimeoutError:
        return f"web: provider {recipe.web.provider!r} gave no search result within {timeout_s:g} s"
    except Exception as exc:  # noqa: BLE001 - any failure is the answer to the probe
        return f"web: provider {recipe.web.provider!r} is not reachable: {type(exc).__name__}: {exc}"[:300]
    return None


# ----------------------------------------------------------------------------- all together


async def preflight_problems(
    recipe: Recipe, cases: Sequence[Case], ledger: Ledger | None = None, *, roles: Collection[str] | None = None
) -> list[str]:
    """Every problem the preflight finds; `roles`: the only roles the command calls (a rescore: its
    judges'), whose models alone are checked, with no check of the systems' epochs."""
    probes = _without_background(model_uses(recipe, probed=True, roles=roles))
    models, web = await asyncio.gather(
        model_problems(model_uses(recipe, roles=roles), probes, ledger),
        web_problem(recipe),
    )
    problems = models + background_problems(recipe, roles=roles)
    problems += data_problems(recipe.benchmark.name) + judge_problems(recipe, cases)
    problems += epoch_problems(recipe) if roles is None else []
    problems += repeat_problems(recipe)
    return problems + ([web] if web else [])


@dataclass
class Preflight:
    seconds: float
    calls: list[LedgerEntry]  # the probes' model calls, for the run's ledger (node `preflight`)


async def preflight(
    recipe: Recipe, cases: Sequence[Case], *, roles: Collection[str] | None = None, command: str = "run"
) -> Preflight:
    """Raise PreflightError listing every problem; else say how long it took and what it called.
    `roles`, `command`: a command that calls only some roles (`rescore`: the judges')."""
    started = time.perf_counter()
    ledger = Ledger(None)
    with call_tags(node="preflight"):
        problems = await preflight_problems(recipe, cases, ledger, roles=roles)
    if problems:
        skip = "(`atelier run --no-preflight` skips these checks)" if command == "run" else None
        raise PreflightError(problems, skip=skip)
    return Preflight(time.perf_counter() - started, list(ledger.entries))
