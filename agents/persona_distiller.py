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

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import Section, build_messages

# Table 5 plus the fields at least half of the 25 released personas fill in
# (Educational Background, Family Atmosphere, Living Environment); every other facet path the
# released personas use follows in RELEASED_FACETS.
PDR_PERSONA_SCHEMA: dict[str, dict[str, tuple[str, ...]] | tuple[str, ...]] = {
    "Basic Attributes": {
        "Identity Characteristics": ("Name", "Age", "Gender", "Occupation", "Educational Background"),
        "Family Status": ("Family Members and Relationships", "Pets", "Family Atmosphere"),
        "Long-term Spatial Characteristics": ("Permanent Residence", "Hometown", "Living Environment"),
    },
    "Behavioral Characteristics": {
        "Online Usage Habits": ("High-frequency Apps and Usage Duration", "Online Social Behavior"),
        "Offline Long-term Behavior": (
            "Daily Routine",
            "Consumption Cycle",
            "Consumption Characteristics",
            "Periodic Mobility",
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
            "Exercise Habits",
            "Exercise Goals",
            "Exercise Types",
            "Other Investments",
            "Exercise Locations",
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

# The facet paths the 25 released English personas (personas_en.jsonl.gz) use beyond the schema
# above, in the order they first appear there: the releases nest sections differently from one
# persona to the next (Environment under Behavioral Characteristics, Risk Appetite under Investment
# Experience or beside it, ...). 19% of the facets PDR personas fill were missing without them
# (Risk Appetite alone is in 15 of 25); tests/test_persona_schema.py derives them from the data again.
RELEASED_FACETS: tuple[str, ...] = (
    "Basic Attributes > Identity Characteristics > Academic Interests",
    "Basic Attributes > Family Status > Parental Expectations",
    "Basic Attributes > Long-term Spatial Characteristics > Environmental Influence",
    "Environment > Time > Time Management",
    "Financial Information > Investment Experience > Risk Management > Risk Appetite",
    "Basic Attributes > Identity Characteristics > Cultural Background",
    "Basic Attributes > Long-term Spatial Characteristics > Hometown Memories",
    "Behavioral Characteristics > Online Usage Habits > Use of Digital Tools",
    "Behavioral Characteristics > Environment > Time > Time Preference",
    "Behavioral Characteristics > Environment > Time > Time Management",
    "Behavioral Characteristics > Environment > Geographical Location > Frequent Places",
    "Behavioral Characteristics > Environment > Geographical Location > Travel Radius",
    "Behavioral Characteristics > Personality Traits > Personality",
    "Behavioral Characteristics > Personality Traits > Decision-making Style",
    "Behavioral Characteristics > Personality Traits > Shopping Preference",
    "Behavioral Characteristics > Preferences and Interests > Lifestyle Preferences > Diet",
    "Behavioral Characteristics > Preferences and Interests > Lifestyle Preferences > Accommodation Preferences",
    "Behavioral Characteristics > Preferences and Interests > Lifestyle Preferences > Shopping",
    "Behavioral Characteristics > Preferences and Interests > Lifestyle Preferences > Services",
    "Behavioral Characteristics > Preferences and Interests > Travel Preferences > Frequency",
    "Behavioral Characteristics > Preferences and Interests > Travel Preferences > Destinations",
    "Behavioral Characteristics > Preferences and Interests > Travel Preferences > Travel Style",
    "Behavioral Characteristics > Preferences and Interests > Content Preferences > Article Collection",
    "Behavioral Characteristics > Preferences and Interests > Content Preferences > Short Videos",
    "Behavioral Characteristics > Preferences and Interests > Content Preferences > Screenshots",
    "Behavioral Characteristics > Preferences and Interests > Content Preferences > Books, Movies, Singers, Actors",
    "Behavioral Characteristics > Preferences and Interests > Exercise Preferences > Exercise Habits",
    "Behavioral Characteristics > Preferences and Interests > Exercise Preferences > Exercise Goals",
    "Behavioral Characteristics > Preferences and Interests > Exercise Preferences > Exercise Types",
    "Behavioral Characteristics > Preferences and Interests > Exercise Preferences > Other Investments",
    "Behavioral Characteristics > Preferences and Interests > Exercise Preferences > Exercise Locations",
    "Basic Attributes > Identity Characteristics > Cultural Influence",
    "Financial Information > Investment Experience > Future Plans",
    "Financial Information > Risk Management > Risk Appetite",
    "Basic Attributes > Long-term Spatial Characteristics > Upbringing Background",
    "Behavioral Characteristics > Offline Long-term Behavior > Learning Habits",
    "Environment > Time > Balance Between Study and Leisure",
    "Environment > Geographical Location > Transportation Mode",
    "Personality Traits > Interpersonal Relationships / Social Style",
    "Financial Information > Risk Management > Emergency Preparedness",
    "Personality Traits > Communication Style",
    "Behavioral Characteristics > Online Usage Habits > Content Preferences",
    "Basic Attributes > Identity Characteristics > Educational Background > Undergraduate",
    "Basic Attributes > Identity Characteristics > Educational Background > Graduate",
    "Behavioral Characteristics > Health Status > Physical Condition > Medical History",
    "Behavioral Characteristics > Health Status > Physical Condition > Mental Condition",
    "Behavioral Characteristics > Health Status > Physical Condition > Physical Fitness",
    "Behavioral Characteristics > Health Status > Health Needs > Health Needs",
    "Behavioral Characteristics > Financial Information > Financial Status > Income Structure",
    "Behavioral Characteristics > Financial Information > Financial Status > Asset Status",
    "Behavioral Characteristics > Financial Information > Financial Status > Consumption Characteristics",
    "Behavioral Characteristics > Financial Information > Financial Status > Debt Situation",
    "Behavioral Characteristics > Financial Information > Investment Experience > Investment Background",
    "Behavioral Characteristics > Financial Information > Investment Experience > Knowledge Level",
    "Behavioral Characteristics > Financial Information > Investment Experience > Investment Goals",
    "Behavioral Characteristics > Financial Information > Risk Management > Risk Appetite",
    "Basic Attributes > Identity Characteristics > Career Development",
    "Behavioral Characteristics > Online Usage Habits > Content Consumption",
    "Behavioral Characteristics > Environment > Time > Time Allocation",
    "Behavioral Characteristics > Financial Information > Investment Experience > Risk Management",
    "Basic Attributes > Long-term Spatial Characteristics > Work Environment",
    "Environment > Time > Work Rhythm",
    "Basic Attributes > Identity Characteristics > Career Experience",
    "Environment > Time > Weekend Schedule",
    "Health Status > Health Needs",
    "Behavioral Characteristics > Offline Long-term Behavior > Time Management",
    "Basic Attributes > Family Status > Family Atmosphere > Permanent Residence",
    "Basic Attributes > Family Status > Family Atmosphere > Hometown",
    "Basic Attributes > Family Status > Family Atmosphere > Living Environment Influence",
    "Behavioral Characteristics > Environment > Time > Weekend Schedule",
    "Behavioral Characteristics > Online Usage Habits > Learning Habits",
    "Preferences and Interests > Travel Preferences > Travel Companions",
    "Financial Information > Investment Experience > Risk Management > Emergency Preparedness",
    "Behavioral Characteristics > Online Usage Habits > Content Participation",
    "Environment > Time > Time Allocation",
)


def _facet_paths() -> tuple[str, ...]:
    paths: list[str] = []
    for section, body in PDR_PERSONA_SCHEMA.items():
        if isinstance(body, tuple):
            paths += [SEPARATOR.join((section, f)) for f in body]
        else:
            paths += [SEPARATOR.join((section, sub, f)) for sub, fields in body.items() for f in fields]
    return tuple(dict.fromkeys([*paths, *RELEASED_FACETS]))


FACET_PATHS = _facet_paths()
FacetPath = Literal[FACET_PATHS]  # type: ignore[valid-type]


def nest_facets(values: Mapping[str, str]) -> dict:
    """Flat `{path: value}` back into the nested persona layout (schema order). A path that runs
    below a facet holding a value (`Educational Background > Graduate` beside `Educational
    Background`) keeps the rest of its path as its key, beside that value."""
    nested: dict = {}
    for path in FACET_PATHS:
        if path in values:
            parts = path.split(SEPARATOR)
            node = nested
            while len(parts) > 1 and isinstance(node.setdefault(parts[0], {}), dict):
                node = node[parts.pop(0)]
            node[SEPARATOR.join(parts)] = values[path]
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

    @field_validator("value")
    @classmethod
    def _not_schema_text(cls, value: str, info: ValidationInfo) -> str:
        """A value that only repeats the schema (a field's description, the facet's path or name) is
        no evidence about the user: refused, so the model is asked again (SmolLM2 stored "The facet's
        updated value." as a value)."""
        said = " ".join(value.lower().split()).strip(" .")
        facet = str(info.data.get("facet", ""))
        echoes = {*_SCHEMA_TEXT, facet.lower(), facet.split(SEPARATOR)[-1].lower()}
        if not said or said in echoes or any(said in text for text in _SCHEMA_TEXT if len(said) > 12):
            raise ValueError(
                f"the value {value!r} repeats the schema's text instead of saying something about the user"
            )
        return value


class PersonaUpdate(BaseModel):
    updates: list[FacetUpdate] = Field(default_factory=list)


# The descriptions of the fields an update is asked in, as a weak model echoes them.
_SCHEMA_TEXT = {
    " ".join(str(f.description).lower().split()).strip(" .")
    for model in (FacetUpdate, PersonaUpdate)
    for f in model.model_fields.values()
    if f.description
}
_SCHEMA_TEXT |= {"the facet's updated value", "the facet's new value", "updated value", "value"}


async def distil_persona(gateway: Gateway, role: str, current: Mapping[str, str], new_history: str) -> PersonaUpdate:
    sections = [
        Section("Persona schema (facet paths)", "\n".join(FACET_PATHS)),
        Section("Current persona", "\n".join(f"{p}: {v}" for p, v in current.items()) or "(empty: nothing known yet)"),
        Section("New history items", new_history, untrusted=True),
    ]
    return await gateway.structured(role, build_messages(ROLE, sections, TASK), PersonaUpdate)
