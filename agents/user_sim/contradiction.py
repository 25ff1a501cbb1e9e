"""Items of a synthesized history that contradict the persona they were written for.

Two ways, as `simulate check` has them:

- **Offline rules**, where the persona fixes a fact: where the person lives (a residence or
  hometown facet), what they do (an occupation facet) and how old they are (an age facet). An item
  in which the person says they live somewhere the persona never names ("I live in Brazil" for a
  persona living in Suzhou), that they work as something else ("as a nurse, I ..." for a student),
  or an age outside the persona's, contradicts it. Only first-person statements count: "I'd love to
  visit Brazil" says nothing of where one lives.
- **A model judge** (`judge_contradictions`), when a checker model is given: it reads the persona
  and the items in batches and names the items that state something the persona rules out, with
  the facet and why; only ids of real items are kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from atelier.agents.models.budgeted import at_most
from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import Section, build_messages
from atelier.agents.user_sim.persona import persona_traits
from atelier.benchmarks.common.tasks import gather_or_cancel

_PLACE = r"(?:the\s+)?([A-Z][\w'’-]+(?:(?:,\s*|\s+)(?:[A-Z][\w'’-]+)){0,3})"
_LIVES = re.compile(
    r"\bI(?:'m|’m| am)?\s*(?:live|living|reside|residing|based|settled|grew up|was born|moved|relocated)\s+"
    r"(?:in|to|at|near)\s+"
    + _PLACE
    + r"|\b(?:I(?:'m|’m| am) from|my home(?:town)? (?:is )?in|here in|back home in)\s+"
    + _PLACE
)
_WORKS = re.compile(
    r"\b(?:I(?:'m|’m| am) an?|I work as an?|I worked as an?|as an?|my job as an?|in my work as an?)\s+"
    r"((?:[a-z]+\s+){0,2}[a-z]+)",
)
_AGE = re.compile(r"\bI(?:'m|’m| am)\s+(\d{1,3})(?:\s+years?\s+old|\s*-?\s*year-old|\b(?!\s*(?:%|km|kg|miles)))")
_ZH_LIVES = re.compile(r"我(?:住在|生活在|来自|家在)([\u4e00-\u9fff]{2,6})")
# occupations a person names themselves by; a claimed one the persona's occupation does not name is
# a contradiction (words a persona uses for the same work are left alone: "developer" for an engineer)
OCCUPATIONS = frozenset(
    """accountant actor actress architect artist astronaut baker banker barber barista bartender biologist
    butcher carpenter cashier chef chemist cleaner clerk coach consultant cook dancer dentist designer detective
    diplomat doctor driver economist electrician engineer farmer firefighter fisherman florist gardener geologist
    hairdresser historian housekeeper janitor journalist judge lawyer lecturer librarian lifeguard machinist
    manager mechanic midwife miner musician nurse optician painter paramedic pharmacist philosopher photographer
    physician physicist physiotherapist pilot plumber poet policeman policewoman politician postman professor
    programmer psychologist receptionist reporter researcher retiree sailor salesman scientist secretary singer
    soldier student surgeon tailor teacher technician therapist translator tutor veterinarian waiter waitress
    welder writer""".split()
)
# the same work, named otherwise: a claimed occupation is none of the persona's when no word of this
# group is in its occupation text
_SAME_WORK = [
    {"programmer", "engineer", "developer", "software", "computer"},
    {"doctor", "physician", "surgeon", "medical"},
    {"student", "undergraduate", "graduate", "studying", "phd", "pupil", "major", "majoring"},
    {"teacher", "professor", "lecturer", "tutor", "educator", "instructor"},
    {"writer", "journalist", "reporter", "author", "editor"},
    {"researcher", "scientist", "research"},
    {"retiree", "retired"},
]


def _facet(attributes: dict[str, Any], *names: str) -> str:
    """The values of the facets whose last name part is one of `names`, joined."""
    wanted = {n.casefold() for n in names}
    return " ; ".join(
        t.value for t in persona_traits(attributes) if t.path.rsplit(">", 1)[-1].strip().casefold() in wanted
    )


def _words(text: str) -> set[str]:
    return {w.casefold() for w in re.findall(r"[\w'’-]+", text)}


def _ages(text: str) -> tuple[int, int] | None:
    numbers = [int(n) for n in re.findall(r"\d{1,3}", text)]
    return (min(numbers), max(numbers)) if numbers else None


def offline_contradictions(attributes: dict[str, Any], texts: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Per item id (of `texts`: (id, what the person says in it)), why it contradicts a fact the
    persona fixes; items that do not are left out."""
    persona_words = _words(" ".join(t.value for t in persona_traits(attributes)))
    places = _facet(attributes, "Permanent Residence", "Hometown", "Current Residence", "Residence", "Location", "City")
    places += " " + _facet(attributes, "常住地", "家乡", "居住地", "现居地")
    occupation = _facet(attributes, "Occupation", "Job", "Profession", "职业")
    age = _ages(_facet(attributes, "Age", "年龄"))
    out: dict[str, str] = {}
    for item_id, text in texts:
        found: list[str] = []
        if places.strip():
            for match in _LIVES.finditer(text):
                place = match.group(1) or match.group(2)
                named = _words(place) - {"the"}
                if named and not named & persona_words:
                    found.append(f"says {match.group(0).strip()!r}, but the persona lives in {places.strip()!r}")
            for match in _ZH_LIVES.finditer(text):
                if match.group(1)[:2] not in places:
                    found.append(f"says {match.group(0)!r}, but the persona lives in {places.strip()!r}")
        if occupation.strip():
            held = _words(occupation)
            for match in _WORKS.finditer(text):
                claimed = next((w for w in match.group(1).casefold().split() if w in OCCUPATIONS), None)
                if claimed is None:  # "I'm a big fan", "as a result": no occupation named
                    continue
                same = next((group for group in _SAME_WORK if claimed in group), {claimed, claimed + "s"})
                if not same & held:
                    found.append(f"says {match.group(0).strip()!r}, but the persona is {occupation.strip()!r}")
        if age is not None:
            for match in _AGE.finditer(text):
                said = int(match.group(1))
                if said < age[0] - 2 or said > age[1] + 2:
                    found.append(f"says {match.group(0).strip()!r}, but the persona's age is {age[0]}-{age[1]}")
        if found:
            out[item_id] = "; ".join(dict.fromkeys(found))
    return out


# ----------------------------------------------------------------------------- the model judge

JUDGE_ROLE = (
    "You check a synthesized personal history against the persona it was written for. An item "
    "contradicts the persona when it states something the persona rules out: another home, another "
    "job, another age, family or health than the persona's, a preference opposite to one it states."
)
JUDGE_TASK = (
    "List the items (by id) that contradict the persona, each with the persona facet it contradicts and "
    "why, in one sentence. An item that adds detail the persona does not mention is no contradiction. "
    "List none when none does."
)
BATCH = 40


class Contradiction(BaseModel):
    item_id: str = Field(description="The item's id, as listed.")
    facet: str = Field(description="The persona facet it contradicts.")
    why: str = Field(description="What the item says against the persona, in one sentence.")


class Contradictions(BaseModel):
    contradictions: at_most(Contradiction, BATCH, description="The items that contradict it.")  # type: ignore[valid-type]


async def judge_contradictions(
    gateway: Gateway, role: str, attributes: dict[str, Any], texts: Sequence[tuple[str, str]]
) -> dict[str, str]:
    """Per item id, why the checker model finds it contradicts the persona (ids not among `texts` dropped)."""
    persona = "\n".join(t.render() for t in persona_traits(attributes))
    known = {item_id for item_id, _ in texts}
    batches = [texts[i : i + BATCH] for i in range(0, len(texts), BATCH)]

    async def judge(batch: Sequence[tuple[str, str]]) -> Contradictions:
        items = "\n".join(f"[{item_id}] {' '.join(text.split())}" for item_id, text in batch)
        sections = [Section("Persona", persona), Section("Items", items, untrusted=True)]
        return await gateway.structured(role, build_messages(JUDGE_ROLE, sections, JUDGE_TASK), Contradictions)

    out: dict[str, str] = {}
    for answer in await gather_or_cancel(judge(b) for b in batches):
        for found in answer.contradictions:
            if found.item_id in known and found.item_id not in out:
                out[found.item_id] = f"{found.facet}: {' '.join(found.why.split())}"
    return out
