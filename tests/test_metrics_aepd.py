"""AEPD: the paper's worked examples (Fig. 2 and the iKAT 2024 case study) and its edge cases."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from atelier.benchmarks.metrics.aepd import (
    AEPDInput,
    aepd_scores,
    content_length_uniformity,
    normalized_personalized_content_length,
    normalized_personalized_precision,
)


def _aspect(name: str, personalized: bool, words: int | None = None) -> dict:
    return {"aspect": name, "personalized": personalized, "words": words}


# Fig. 2: 7 possible aspects (3 personalized); the response covers Overview (46 words, not personalized),
# Topics of interest (65, personalized) and Location (16, personalized).
FIGURE_2 = [
    _aspect("Overview", False, 46),
    _aspect("Topics of interest", True, 65),
    _aspect("Location", True, 16),
    _aspect("Submission format", False),
    _aspect("Submission deadlines", True),
    _aspect("Review process", False),
    _aspect("Registration fee", False),
]

# iKAT 2024 topic 2 turn 14 (Fig. 5 and 6): 21 possible aspects, 6 personalized (#6, 7, 12, 19, 20, 21);
# the turn covers 8, 5 of them personalized with 4, 10, 25, 30, 26 words and 3 others with 9, 9, 4.
# Fig. 6 gives the counts and lengths but its layout does not say which named aspect has which length;
# the names below are our reading of the response, and the scores depend only on counts and lengths.
IKAT_2_14 = [
    _aspect("Location", False, 4),
    _aspect("Accommodation type", False, 9),
    _aspect("Room features", False),
    _aspect("Amenities/services", False, 9),
    _aspect("Architecture/design", False),
    _aspect("Sustainability features", True, 4),
    _aspect("Eco-friendly certifications", True),
    _aspect("Service quality", False),
    _aspect("Proximity to attractions", False),
    _aspect("Unique experiences", False),
    _aspect("Staff and language", False),
    _aspect("Price range", True, 25),
    _aspect("Transportation/accessibility", False),
    _aspect("Dining options", False),
    _aspect("Spa/wellness facilities", False),
    _aspect("Recreational opportunities", False),
    _aspect("Number of rooms", False),
    _aspect("Occasions", False),
    _aspect("Taxes and fees", True, 30),
    _aspect("Deals and booking options", True, 26),
    _aspect("Suitability for budget travelers", True, 10),
]


def test_figure_2_worked_example() -> None:
    result = aepd_scores(AEPDInput(aspects=FIGURE_2))
    assert (result.possible_aspects, result.possible_personalized) == (7, 3)
    assert (result.turn_aspects, result.turn_personalized) == (3, 2)
    assert result.pp == pytest.approx(2 / 3)
    assert result.pp_general == pytest.approx(3 / 7)
    assert result.npp == pytest.approx(5 / 12)  # (2/3 - 3/7) / (1 - 3/7)
    assert (result.l_all, result.l_per, result.l_nonper) == (127, 40.5, 46.0)
    # Personalized aspects get fewer words on average than the non-personalized one: NPCL = 0.
    assert result.npcl == 0.0
    assert result.p_score == 0.0
    assert result.ar == pytest.approx(3 / 7)
    # Hand computation: l' = (46, 65, 16) / 127, SS = 0.075681, RNSS = sqrt(SS / 2) = 0.194527.
    assert result.rnss == pytest.approx(0.194527, abs=1e-6)
    assert result.d_score == pytest.approx(0.3452, abs=5e-5)


def test_ikat_case_study_reproduces_paper_scores() -> None:
    result = aepd_scores(AEPDInput(aspects=IKAT_2_14))
    assert (result.possible_aspects, result.possible_personalized, result.turn_aspects, result.turn_personalized) == (
        21,
        6,
        8,
        5,
    )
    assert result.npp == pytest.approx(0.475)  # (5/8 - 6/21) / (1 - 6/21)
    assert result.npcl == pytest.approx(5 / 47)  # (19 - 22/3) / (117 - 22/3)
    assert round(result.p_score, 4) == 0.0505
    assert round(result.d_score, 4) == 0.3165


def test_words_are_counted_from_content_by_whitespace() -> None:
    aspects = [
        {"aspect": "a", "personalized": True, "content": "Icelandair Hotel  Reykjavik\nNatura"},
        {"aspect": "b", "personalized": False, "content": "   "},
        {"aspect": "c", "personalized": False, "content": "two words", "words": 2},
    ]
    result = aepd_scores(AEPDInput.model_validate({"aspects": aspects}))
    assert result.turn_aspects == 2
    assert result.l_all == 6
    with pytest.raises(ValidationError, match="words=3 but content has 2 words"):
        AEPDInput.model_validate({"aspects": [{"aspect": "c", "personalized": False, "content": "x y", "words": 3}]})


def test_turn_covering_no_aspect_scores_zero() -> None:
    result = aepd_scores(AEPDInput(aspects=[_aspect("a", True), _aspect("b", False)]))
    assert (result.npp, result.npcl, result.p_score) == (0.0, 0.0, 0.0)
    assert result.ar == 0.0
    assert result.clu == 1.0  # the authors' code: no lengths, no deviation
    assert result.d_score == 0.0


def test_all_possible_aspects_personalized_gives_zero_npp() -> None:
    assert normalized_personalized_precision(1.0, 1.0) == 0.0
    result = aepd_scores(AEPDInput(aspects=[_aspect("a", True, 10), _aspect("b", True)]))
    assert result.npp == 0.0
    assert result.p_score == 0.0


def test_only_personalized_aspects_covered() -> None:
    # L_nonper = 0 by definition, so NPCL = L_per / L_all = 20 / 40.
    assert normalized_personalized_content_length([10, 30], []) == pytest.approx(0.5)
    result = aepd_scores(AEPDInput(aspects=[_aspect("a", True, 10), _aspect("b", True, 30), _aspect("c", False)]))
    assert result.npp == pytest.approx(1.0)  # PP = 1 against PP' = 2/3
    assert result.p_score == pytest.approx(0.5)


def test_only_nonpersonalized_aspects_covered() -> None:
    # L_all equals L_nonper for a single covered aspect: the paper defines NPCL = 0.
    assert normalized_personalized_content_length([], [12]) == 0.0


def test_content_length_uniformity() -> None:
    assert content_length_uniformity([7]) == 1.0
    assert content_length_uniformity([5, 5, 5, 5]) == pytest.approx(1.0)
    # Two aspects 90/10: SS = 2 * 0.4^2 = 0.32, RNSS = 0.4.
    assert content_length_uniformity([90, 10]) == pytest.approx(0.6)


def test_invalid_annotations_are_rejected() -> None:
    with pytest.raises(ValidationError, match="listed twice"):
        AEPDInput(aspects=[_aspect("a", True, 3), _aspect("a", False)])
    with pytest.raises(ValidationError):
        AEPDInput(aspects=[_aspect("a", True, 0)])
    with pytest.raises(ValidationError):
        AEPDInput(aspects=[])
