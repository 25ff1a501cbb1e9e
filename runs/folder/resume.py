"""What may change when a run folder is resumed, and what a change invalidates.

A run folder holds what its recipe computed: the systems' outputs, and the judgments of those
outputs. A recipe is split into two identities:

- the **system identity** decides the outputs: the seed; the benchmark's name, split, setting and
  options; every system (pipeline, memory, setting, ...); the web; the simulated user's part in
  episodes (`[user_sim]`); and the answer identity of the model behind every system-side role
  (`system`, `user_sim`, and the roles that fall back to them). A change refuses the resume: the
  folder's outputs would no longer be this recipe's.
- the **judgment identity** decides the judgments: the judges, the R-J pairs added to the gold
  (`benchmark.rj_pairs_file`), whether later epochs reuse judgments (`run.reuse_judgments`), and
  the answer identity of the model behind every judge-side role (`judge` and the roles that fall
  back to it). A change keeps every system output and judges
  each stored response again.

Everything else changes nothing that was computed and may differ freely: `limit`, concurrency,
the counterfactual controls (`[run] controls`, a system's `controls`: more add control episodes,
fewer leave some out of the summary),
`epochs` (an epoch's episodes are the same whatever the number of epochs: more epochs add episodes,
fewer leave the later ones out of the summary), `budget_usd` (a larger one resumes a run its budget
stopped; spend so far counts from the ledger), out_dir, the cache settings, and the model settings outside `ModelSettings.answer_identity()` —
timeouts, retries, rate limits, keys, and the scripted model's latency and fault injection.

Both identities are computed from the JSON form of a recipe, the form config.json keeps. Each
result record carries the digest of the system identity that made it (`made_by`, from
`output_digest`), so a folder whose config.json was edited, replaced or deleted cannot hand another
recipe's outputs to a resumed run: a record made by another identity refuses the resume.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from atelier.agents.models.settings import ROLE_FALLBACK, ROLES, ModelSettings, settings_for_role

# every role on one side: the judge's, with the judges' own roles falling back to it; the rest
JUDGE_SIDE = ("judge", *sorted(role for role, fallback in ROLE_FALLBACK.items() if fallback == "judge"))
SYSTEM_SIDE = tuple(role for role in (*ROLES, *sorted(ROLE_FALLBACK)) if role not in JUDGE_SIDE)
_BENCHMARK_KEYS = ("name", "split", "setting", "options")


@dataclass(frozen=True)
class ResumeCheck:
    refused: list[str]  # what changed in the system identity, e.g. ["models.system", "seed"]
    judgments_changed: bool


def _role_identities(recipe: dict[str, Any], system: dict[str, Any], roles: tuple[str, ...]) -> dict[str, Any]:
    models = {role: ModelSettings() for role in ROLES}
    models.update({role: ModelSettings.model_validate(m) for role, m in (recipe.get("models") or {}).items()})
    models.update({role: ModelSettings.model_validate(m) for role, m in (system.get("models") or {}).items()})
    return {role: settings_for_role(models, role).answer_identity() for role in roles}


def system_identity(recipe: dict[str, Any]) -> dict[str, Any]:
    """Per-system entries are keyed by system name (see `_shared`)."""
    benchmark = recipe.get("benchmark") or {}
    systems = recipe.get("systems") or []
    return {
        "seed": recipe.get("seed"),
        **{f"benchmark.{key}": benchmark.get(key) for key in _BENCHMARK_KEYS},
        "web": recipe.get("web"),
        "user_sim": recipe.get("user_sim") or {"clarify": False},  # folders from before [user_sim] did not ask
        # a system's controls decide only its control episodes, which carry the rest of this identity
        "systems": {s.get("name"): {k: v for k, v in s.items() if k not in ("models", "controls")} for s in systems},
        **{
            f"models.{role}": {s.get("name"): _role_identities(recipe, s, (role,))[role] for s in systems}
            for role in SYSTEM_SIDE
        },
    }


def judgment_identity(recipe: dict[str, Any]) -> dict[str, Any]:
    return {
        "judges": recipe.get("judges"),
        # whether a later epoch's judges keep their seeds (the same response, the same judgment) or not
        "reuse_judgments": bool((recipe.get("run") or {}).get("reuse_judgments", False)),
        "rj_pairs_file": (recipe.get("benchmark") or {}).get("rj_pairs_file"),
        "models": {s.get("name"): _role_identities(recipe, s, JUDGE_SIDE) for s in recipe.get("systems") or []},
    }


_PER_SYSTEM = ("systems", "models")


def _shared(before: dict[str, Any], now: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both identities restricted to the systems both recipes have: a resumed run may add systems or
    leave some out (`--systems`); a system kept under its name must not have changed."""
    names = set((before.get("systems") or before.get("models") or {}).keys()) & set(
        (now.get("systems") or now.get("models") or {}).keys()
    )

    def keep(identity: dict[str, Any]) -> dict[str, Any]:
        return {
            key: {n: v for n, v in value.items() if n in names}
            if key.startswith(_PER_SYSTEM) and isinstance(value, dict)
            else value
            for key, value in identity.items()
        }

    return keep(before), keep(now)


def check_resume(previous: dict[str, Any], current: dict[str, Any]) -> ResumeCheck:
    """Compare the recipe a folder was run with (`previous`, from config.json) to `current`."""
    try:
        before, now = _shared(system_identity(previous), system_identity(current))
        judged_before, judged_now = _shared(judgment_identity(previous), judgment_identity(current))
    except (ValidationError, ValueError, TypeError, AttributeError):  # written by another version
        return ResumeCheck(refused=["the recipe in config.json is unreadable"], judgments_changed=True)
    changed = [key for key in now if before.get(key) != now[key]]
    # a role that changed only because the role it falls back to did goes unmentioned
    refused = [key for key in changed if f"models.{ROLE_FALLBACK.get(key.removeprefix('models.'))}" not in changed]
    return ResumeCheck(refused=refused, judgments_changed=judged_before != judged_now)


def output_digest(recipe: dict[str, Any], system: str) -> str:
    """The digest of the system identity of `system` in `recipe` (JSON form): what its outputs rest on."""
    identity = system_identity(recipe)
    mine = {
        key: value.get(system) if key.startswith(_PER_SYSTEM) and isinstance(value, dict) else value
        for key, value in identity.items()
    }
    blob = json.dumps(mine, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
