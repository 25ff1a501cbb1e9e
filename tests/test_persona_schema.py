"""persona_model's schema covers every facet PDR-Bench's released personas use (derived from the
data here), and a value that only echoes the schema is refused (issue 33, item 3)."""

from __future__ import annotations

import gzip
import json

import pytest
from pydantic import ValidationError

from atelier.agents.persona_distiller import FACET_PATHS, FacetUpdate, nest_facets
from atelier.benchmarks.case import persona_facets
from atelier.benchmarks.data_files import data_dir

DIET = "Preferences and Interests > Lifestyle Preferences > Diet"


def released_facets() -> dict[str, int]:
    path = data_dir() / "pdr_bench" / "personas_en.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path} is not here (../shared/data)")
    counts: dict[str, int] = {}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                persona = json.loads(line)
                persona.pop("userid", None)
                for facet, _ in persona_facets(persona):
                    counts[facet] = counts.get(facet, 0) + 1
    return counts


def test_every_facet_of_the_released_personas_is_in_the_schema():
    counts = released_facets()
    assert len(counts) > 100 and sum(counts.values()) > 1000  # the 25 personas, as released
    missing = {facet: n for facet, n in counts.items() if facet not in FACET_PATHS}
    assert missing == {}
    assert counts["Financial Information > Investment Experience > Risk Management > Risk Appetite"] == 15


@pytest.mark.parametrize(
    "echo",
    [
        "The facet's updated value.",
        "The facet's complete updated value",
        "  ",
        "Diet",
        DIET,
        "Ids of the new history items supporting it.",
    ],
)
def test_a_value_that_echoes_the_schema_is_refused(echo):
    with pytest.raises(ValidationError, match="repeats the schema's text"):
        FacetUpdate(facet=DIET, value=echo)


def test_a_value_about_the_user_is_kept():
    assert FacetUpdate(facet=DIET, value="Vegetarian since 2019; avoids soy.").value.startswith("Vegetarian")


def test_nesting_keeps_a_path_that_runs_below_a_valued_facet():
    base = "Basic Attributes > Identity Characteristics > Educational Background"
    nested = nest_facets({base: "BSc Physics", f"{base} > Graduate": "MSc Optics"})
    assert nested == {
        "Basic Attributes": {
            "Identity Characteristics": {
                "Educational Background": "BSc Physics",
                "Educational Background > Graduate": "MSc Optics",
            }
        }
    }
