"""A persona's traits as the simulated user and its history writer see them.

A trait is one facet of a PDR-schema persona (`Section > Subsection > Field: value`). The PDR
annotation protocol (appendix H) asks for at least five history items per *preference tag*; here a
preference tag is a facet whose path names a preference, an interest or an appetite (`Preferences
and Interests > ...`, `Environment > Time > Time Preference`, `Personality Traits > Shopping
Preference`, `... > Risk Appetite`), with the same tags found in the English and Chinese persona
files (`偏好`, `兴趣`, `购物倾向`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from atelier.benchmarks.case import persona_facets

PREFERENCE_MARKERS = ("preference", "interest", "appetite", "偏好", "兴趣", "喜好", "爱好", "倾向")


@dataclass(frozen=True)
class Trait:
    path: str
    value: str

    @property
    def is_preference(self) -> bool:
        lowered = self.path.casefold()
        return any(marker in lowered for marker in PREFERENCE_MARKERS)

    def render(self) -> str:
        return f"{self.path}: {self.value}"


def persona_traits(attributes: dict[str, Any]) -> list[Trait]:
    """Every facet with a non-empty value, in schema order."""
    return [Trait(path, value) for path, value in persona_facets(attributes) if value.strip()]


def preference_tags(traits: list[Trait]) -> list[Trait]:
    return [t for t in traits if t.is_preference]


def render_persona(attributes: dict[str, Any]) -> str:
    return "\n".join(t.render() for t in persona_traits(attributes))
