"""Items of a synthesized history that contradict the persona they were written for.

Two ways, as `simulate check` has them:

- **Offline rules**, where the persona fixes a fact: where the person lives (a residence or
  hometown facet), what they do (an occupation facet) and how old they are (an age facet). An item
  in which the person says they live somewhere that is none of the persona's places ("I live in
  Brazil", or "in Nanjing, Jiangsu" for a persona in Suzhou, Jiangsu; China itself is no other
  place for someone in Suzhou), that they work as something else ("As a nurse, I ..." or "I teach
  biology" for a student; a student calling themselves an engineer of their own field), that they
  are an age outside the persona's ("I'm 23", "I just turned 27"), or were an age they have not
  reached ("when I was 26" of a 20-year-old), contradicts it. Only first-person statements of the
  present count: "I'd love to visit Brazil", "my cousin works as a nurse", "I was born in October",
  "I'm 100 percent sure", "I'm 15 minutes from the lab" say nothing of the person's home, work or
  age. The rules were tuned on `agents/user_sim/history_checks.jsonl` (crafted histories with
  their labels) to flag none of its consistent or harmless items; what they catch of the rest is
  measured there (`runs.studies.history_checks`).
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
# first-person statements of where one lives (or is from) now; "I'd love to visit Brazil" says nothing
_LIVES = re.compile(
    r"\bI(?:'m|’m| am|'ve| have)?\s*(?:been\s+)?(?:live|living|lived|reside|residing|based|settled|grew up|"
    r"was born|was raised|moved|relocated)\s+(?:in|to)\s+"
    + _PLACE
    + r"|\b(?:I(?:'m|’m| am) from|I come from|[Mm]y home(?:town)? (?:is )?in|[Hh]ere in|[Bb]ack home in)\s+"
    + _PLACE
)
# what a "place" after "born in" may also be: a month, a day, a season (no place at all)
_NOT_PLACES = frozenset(
    """january february march april may june july august september october november december monday tuesday
    wednesday thursday friday saturday sunday spring summer autumn fall winter the a an""".split()
)
# China and its provinces, regions and largest cities: a PDR persona's home named at another level
# ("I'm from China" of someone in Suzhou, Jiangsu) is no contradiction; another city in the same
# province ("I live in Nanjing, Jiangsu") is
_CHINA = frozenset({"china", "chinese", "mainland", "prc"})
_CHINESE_PLACES = frozenset(
    """anhui beijing chongqing fujian gansu guangdong guangxi guizhou hainan hebei heilongjiang henan hubei hunan
    jiangsu jiangxi jilin liaoning ningxia qinghai shaanxi shandong shanghai shanxi sichuan tianjin tibet xinjiang
    yunnan zhejiang suzhou nanjing hangzhou chengdu changsha wuhan xian xi'an guangzhou shenzhen qingdao jinan
    weifang harbin qiqihar mianyang dalian xiamen kunming hefei ningbo wuxi zhengzhou""".split()
)
_WORKS = re.compile(
    r"(?:\bI(?:'m|’m| am) (?:now |currently |still )?an?|\bI(?:'ve| have) been working as an?|\bI(?:'m|’m| am) "
    r"working as an?|\bI work as an?|\bmy (?:job|work) as an?|\bin my work as an?|(?:^|[.!?]\s+)As an?)\s+"
    r"((?:[A-Za-z-]+\s+){0,2}[A-Za-z-]+)(?=\s*(?:,|\.|;|!|\?|$|\s+(?:I\b|at\b|in\b|for\b|and\b|with\b|who\b)))",
    re.M,
)
_TEACHES = re.compile(r"\bI (?:teach|lecture)\b")
# present age: "I'm 23", "I'm 23 years old", "I just turned 27", "as a 38-year-old"
_AGE_NOW = re.compile(
    r"\bI(?:'m|’m| am)\s+(\d{1,3})(?=\s*(?:years?\s+old|-?\s*year-old|y/?o\b|[,.;!?]|$|\s+(?:and|but|now|this|myself)\b))"
    r"|\bI(?:'ve)?\s+(?:just\s+)?(?:turned|turn|am turning|'m turning|’m turning)\s+(\d{1,3})\b"
    r"|\bas an?\s+(\d{1,3})-year-old\b",
    re.M,
)
# past age: "when I was 26", "at 26, I moved": only an age beyond the persona's contradicts it
_AGE_THEN = re.compile(r"\b(?:[Ww]hen|[Ss]ince) I was\s+(\d{1,3})\b|(?:^|[.!?]\s+)At\s+(\d{1,3}),?\s+I\b", re.M)
_ZH_LIVES = re.compile(r"我(?:住在|生活在|来自|家在)([\u4e00-\u9fff]{2,6})")
# occupations a person names themselves by; a claimed one the persona's occupation does not name is
# a contradiction (words a persona uses for the same work are left alone: "developer" for an engineer)
OCCUPATIONS = frozenset(
    """accountant actor actress analyst architect artist astronaut baker banker barber barista bartender biologist
    butcher carpenter cashier chef chemist cleaner clerk coach consultant cook copywriter dancer dentist designer
    detective developer diplomat director doctor driver economist editor electrician engineer entrepreneur farmer
    firefighter fisherman florist freelancer gardener geologist hairdresser historian housekeeper illustrator
    intern janitor journalist judge lawyer lecturer librarian lifeguard machinist manager mechanic midwife miner
    musician nurse optician owner painter paramedic pharmacist philosopher photographer physician physicist
    physiotherapist pilot plumber poet policeman policewoman politician postman professor programmer psychologist
    receptionist reporter researcher retiree sailor salesman scientist secretary singer soldier student surgeon
    tailor teacher technician therapist translator tutor veterinarian waiter waitress welder writer""".split()
)
# the same work, named otherwise: a claimed occupation is none of the persona's when no word of this
# group is in its occupation text
_SAME_WORK = [
    {"programmer", "engineer", "developer", "software", "computer", "algorithm"},
    {"doctor", "physician", "surgeon", "medical"},
    {"student", "undergraduate", "graduate", "studying", "phd", "pupil", "major", "majoring"},
    {"teacher", "professor", "lecturer", "tutor", "educator", "instructor"},
    {"writer", "journalist", "reporter", "author", "editor", "copywriter", "freelance"},
    {"researcher", "scientist", "research"},
    {"retiree", "retired"},
    {"nurse", "nursing"},
    {"analyst", "analysis", "data"},
    {"manager", "director", "head", "entrepreneur", "owner", "founder"},
]
_STUDENT = _SAME_WORK[2]
# what a student may also be on the side; any other occupation claimed is a job a student does not hold
_SIDE_JOBS = frozenset({"tutor", "intern", "waiter", "waitress", "barista", "cashier", "researcher", "assistant"})


def _facet(attributes: dict[str, Any], *names: str) -> str:
    """The values of the facets whose last name part is one of `names`, joined."""
    wanted = {n.casefold() for n in names}
    return " ; ".join(
        t.value for t in persona_traits(attributes) if t.path.rsplit(">", 1)[-1].strip().casefold() in wanted
    )


def _words(text: str) -> set[str]:
    return {w.casefold().removesuffix("'s").removesuffix("’s") for w in re.findall(r"[\w'’-]+", text)}


def _ages(text: str) -> tuple[int, int] | None:
    numbers = [int(n) for n in re.findall(r"\d{1,3}", text)]
    return (min(numbers), max(numbers)) if numbers else None


def _place_contradiction(named: list[str], places: set[str]) -> bool:
    """Whether a place a person says they live in (its words, most specific first) is none of the
    persona's: its first word is not one of the persona's places, and it is not China (or a part of
    it) named for a persona who lives in China."""
    if not named or named[0] in _NOT_PLACES or named[0] in places:
        return False
    chinese = bool(places & _CHINESE_PLACES)
    return not (chinese and all(w in _CHINA for w in named))


def _occupation_claims(text: str) -> list[tuple[str, str]]:
    """(what was said, the occupation claimed) for each first-person statement of one's work."""
    found = []
    for match in _WORKS.finditer(text):
        named = [w for w in match.group(1).casefold().split() if w in OCCUPATIONS]
        if named:  # the head noun: "student nurse" is a nurse, "engineering student" a student
            found.append((match.group(0).strip(), named[-1]))
    found += [(m.group(0), "teacher") for m in _TEACHES.finditer(text)]
    return found


def _works_otherwise(claimed: str, held: set[str]) -> bool:
    """Whether claiming `claimed` contradicts an occupation described by the words `held`."""
    same = next((group for group in _SAME_WORK if claimed in group), {claimed, claimed + "s"})
    if not same & held:
        return True
    # a student who says they work as an engineer (their field's job, not theirs yet)
    return bool(held & _STUDENT) and claimed not in _STUDENT and claimed not in _SIDE_JOBS


def offline_contradictions(attributes: dict[str, Any], texts: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Per item id (of `texts`: (id, what the person says in it)), why it contradicts a fact the
    persona fixes; items that do not are left out (see the module docstring)."""
    place_text = _facet(attributes, "Permanent Residence", "Hometown", "Current Residence", "Residence", "Location")
    place_text += " " + _facet(attributes, "City", "常住地", "家乡", "居住地", "现居地")
    places = _words(place_text)
    occupation = _facet(attributes, "Occupation", "Job", "Profession", "职业")
    age = _ages(_facet(attributes, "Age", "年龄"))
    out: dict[str, str] = {}
    for item_id, text in texts:
        found: list[str] = []
        if place_text.strip():
            for match in _LIVES.finditer(text):
                named = [w for w in re.findall(r"[\w'’-]+", (match.group(1) or match.group(2)).casefold())]
                named = [w.removesuffix("'s").removesuffix("’s") for w in named if w != "the"]
                if _place_contradiction(named, places):
                    found.append(f"says {match.group(0).strip()!r}, but the persona lives in {place_text.strip()!r}")
            for match in _ZH_LIVES.finditer(text):
                if match.group(1)[:2] not in place_text:
                    found.append(f"says {match.group(0)!r}, but the persona lives in {place_text.strip()!r}")
        if occupation.strip():
            held = _words(occupation)
            for said, claimed in _occupation_claims(text):
                if _works_otherwise(claimed, held):
                    found.append(f"says {said!r}, but the persona is {occupation.strip()!r}")
        if age is not None:
            for match in _AGE_NOW.finditer(text):
                said_age = int(next(g for g in match.groups() if g))
                if not age[0] - 1 <= said_age <= age[1] + 1:
                    found.append(f"says {match.group(0).strip()!r}, but the persona's age is {age[0]}-{age[1]}")
            for match in _AGE_THEN.finditer(text):
                said_age = int(next(g for g in match.groups() if g))
                if said_age > age[1] + 1:  # an age one has not reached yet
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
