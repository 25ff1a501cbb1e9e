"""The persona distiller: turns history into facet updates of a PDR-Bench structured persona.

PDR-Bench §5.4 asks for memory systems that go "beyond storage toward constructing dynamic,
persona-like models of users". The target is the paper's persona schema (Appendix D, Table 5) as
the released personas (`personas_en.jsonl.gz`) lay it out: sections of subsections of fields,
except `Personality Traits`, whose fields sit directly under the section. Facets are named by
path, `Section > Subsection > Field`, exactly as `benchmarks.case.persona_facets` flattens an
explicit persona, so a distilled persona and a real one render alike.

One call reads the current persona and a batch of new history and returns updates for only the
facets that history touches, each with its full new value and the ids of the items behind it.
"""

from __future__ import annotations

from typing import Literal, Mapping

from pydantic import BaseModel, Field

from agents.gateway import Gateway
from agents.prompts import Section, build_messages

# Table 5 plus the fields at least half of the 25 released personas fill in
# (Educational Background, Family Atmosphere, Living Environment).
PDR_PERSONA_SCHEMA: dict[str, dict[str, tuple[str, ...]] | tuple[str, ...]] = {
    "Basic Attributes": {
        "Identity Characteristics": ("Name", "Age", "Gender", "Occupation", "Educational Background"),
        "Family Status": ("Family Members and Relationships", "Pets", "Family Atmosphere"),
        "Long-term Spatial Characteristics": ("Permanent Residence", "Hometown", "Living Environment"),
    },
    "Behavioral Characteristics": {
        "Online Usage Habits": ("High-frequency Apps and Usage Duration", "Online Social Behavior"),
        "Offline Long-term Behavior": (
            "Daily Routine", "Consumption Cycle", "Consumption Characteristics", "Periodic Mobility",
        ),
    },
    "Environment": {
        "Time": ("Time Preference",),
        "Geographical Location": ("Frequent Places", "Travel Radius"),
    },
    "Personality Traits": ("Personality", "Decision-making Style", "Shopping Preference"),
    "Preferences and Interests": {
        "Lifestyle Preferences": ("Diet", "Accommodation Preferences", "Shopping", "Services"),
        "Travel Preferences": ("Frequency", "Destinations", "Travel Style"),
        "Content Preferences": ("Article Collection", "Short Videos", "Screenshots", "Books, Movies, Singers, Actors"),
        "Exercise Preferences": (
            "Exercise Habits", "Exercise Goals", "Exercise Types", "Other Investments", "Exercise Locations",
        ),
    },
    "Health Status": {
        "Physical Condition": ("Medical History", "Mental Condition", "Physical Fitness"),
        "Health Needs": ("Health Needs",),
    },
    "Financial Information": {
        "Financial Status": ("Income Structure", "Asset Status", "Consumption Characteristics", "Debt Situation"),
        "Investment Experience": ("Investment Background", "Knowledge Level", "Risk Management"),
    },
}
SEPARATOR = " > "


def _facet_paths() -> tuple[str, ...]:
    paths: list[str] = []
    for section, body in PDR_PERSONA_SCHEMA.items():
        if isinstance(body, tuple):
            paths += [SEPARATOR.join((section, f)) for f in body]
        else:
            paths += [SEPARATOR.join((section, sub, f)) for sub, fields in body.items() for f in fields]
    return tuple(paths)


FACET_PATHS = _facet_paths()
FacetPath = Literal[FACET_PATHS]  # type: ignore[valid-type]


def nest_facets(values: Mapping[str, str]) -> dict:
    """Flat `{path: value}` back into the nested persona layout (schema order)."""
    nested: dict = {}
    for path in FACET_PATHS:
        if path in values:
            *parents, leaf = path.split(SEPARATOR)
            node = nested
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = values[path]
    return nested


ROLE = (
    "You maintain a structured model of one user — a persona in the PDR-Bench persona schema — from the "
    "things the user did, wrote and asked. You record only what the history supports."
)
TASK = (
    "Update the persona with the new history items.\n"
    "- Return an update ONLY for each facet the new items give evidence about; leave every other facet out.\n"
    "- An update's value is the facet's complete new value: merge the current value with the new evidence, "
    "keep what is not contradicted, and let newer evidence win where they conflict. Write it in the third "
    "person, concrete and concise, like the entries of a hand-written persona.\n"
    "- Do not guess: no demographics inferred from names or language, no facts the items do not state or "
    "clearly imply.\n"
    "- For each update, list the ids (the [id] before each item) of the new items that support it."
)


class FacetUpdate(BaseModel):
    facet: FacetPath = Field(description="The facet's path in the persona schema.")
    value: str = Field(description="The facet's complete updated value.")
    event_ids: list[str] = Field(default_factory=list, description="Ids of the new history items supporting it.")


class PersonaUpdate(BaseModel):
    updates: list[FacetUpdate] = Field(default_factory=list)


async def distil_persona(
    gateway: Gateway, role: str, current: Mapping[str, str], new_history: str
) -> PersonaUpdate:
    sections = [
        Section("Persona schema (facet paths)", "\n".join(FACET_PATHS)),
        Section("Current persona", "\n".join(f"{p}: {v}" for p, v in current.items()) or "(empty: nothing known yet)"),
        Section("New history items", new_history, untrusted=True),
    ]
    return await gateway.structured(role, build_messages(ROLE, sections, TASK), PersonaUpdate)
