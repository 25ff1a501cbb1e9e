"""AEPD: aspect-based personalization (P_score) and diversification (D_score) of one conversational turn.

Input is the judge's aspect table for a turn's topic t (AEPD Fig. 3): every aspect the topic could
have (A'_all), whether it is relevant to the user's profile (A'_per), and, for the aspects the
response covers (A_all), the number of words about each. An aspect's personalization is a property of
the aspect, so A_per = A_all ∩ A'_per, as in the authors' reference code (risa-hira/AEPD).

    PP    = |A_per| / |A_all|                   PP' = |A'_per| / |A'_all|                (Eq. 1, 2)
    NPP   = max(0, PP - PP') / (1 - PP')                                                 (Eq. 3)
    L_all = sum of lengths; L_per, L_nonper = mean length of personalized / other aspects (Eq. 4-6)
    NPCL  = max(0, L_per - L_nonper) / (L_all - L_nonper)                                (Eq. 7)
    P_score = NPP x NPCL                                                                 (Eq. 8)
    AR    = |A_all| / |A'_all|                                                          (Eq. 9)
    RNSS  = sqrt(sum_a (l_a / L_all - 1 / |A_all|)^2 / 2)                                (Eq. 10-13)
    CLU   = 1 - RNSS;  D_score = AR x CLU                                                (Eq. 14, 15)

Edge cases: the paper's own (NPP = 0 when PP' = 1; L_per or L_nonper = 0 for an empty set;
NPCL = 0 when L_all = L_nonper), plus the authors' code where the paper is silent: a turn covering no
aspect has PP = 0 and CLU = 1 (its AR and so D_score are 0 anyway).
Worked examples reproduced by the tests: Fig. 2 (NPP 5/12, NPCL 0, P_score 0, D_score 0.3452) and
the iKAT 2024 case study (P_score 0.0505, D_score 0.3165).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field, field_validator, model_validator

from atelier.benchmarks.metrics.models import MetricInput, MetricResult


def personalized_precision(n_personalized: int, n_aspects: int) -> float:
    """Share of personalized aspects (Eq. 1 within a turn, Eq. 2 in general); 0 when there are none."""
    if not 0 <= n_personalized <= n_aspects:
        raise ValueError(f"need 0 <= personalized <= aspects, got {n_personalized} of {n_aspects}")
    return n_personalized / n_aspects if n_aspects else 0.0


def normalized_personalized_precision(turn_precision: float, general_precision: float) -> float:
    """NPP (Eq. 3): how far the turn's personalized share exceeds the topic's baseline share."""
    if general_precision == 1.0:
        return 0.0
    return max(0.0, turn_precision - general_precision) / (1.0 - general_precision)


def normalized_personalized_content_length(
    personalized_lengths: Sequence[int], nonpersonalized_lengths: Sequence[int]
) -> float:
    """NPCL (Eq. 7): how much longer personalized aspects are discussed than the others."""
    l_all = sum(personalized_lengths) + sum(nonpersonalized_lengths)
    l_per = _mean_or_zero(personalized_lengths)
    l_nonper = _mean_or_zero(nonpersonalized_lengths)
    if l_all == l_nonper:
        return 0.0
    return max(0.0, l_per - l_nonper) / (l_all - l_nonper)


def aspect_recall(n_turn_aspects: int, n_possible_aspects: int) -> float:
    """AR (Eq. 9): share of the topic's possible aspects that the turn covers."""
    if n_possible_aspects < 1 or not 0 <= n_turn_aspects <= n_possible_aspects:
        raise ValueError(
            f"need 0 <= turn aspects <= possible aspects >= 1, got {n_turn_aspects} of {n_possible_aspects}"
        )
    return n_turn_aspects / n_possible_aspects


def root_normalized_sum_of_squares(lengths: Sequence[int]) -> float:
    """RNSS (Eq. 12-13) of the length distribution against the uniform one; 0 for no aspects."""
    total = sum(lengths)
    if not lengths:
        return 0.0
    if total <= 0:
        raise ValueError("aspect lengths must sum to a positive number of words")
    uniform = 1.0 / len(lengths)
    squares = math.fsum((length / total - uniform) ** 2 for length in lengths)
    return math.sqrt(squares / 2)


def content_length_uniformity(lengths: Sequence[int]) -> float:
    """CLU (Eq. 14) = 1 - RNSS."""
    return 1.0 - root_normalized_sum_of_squares(lengths)


def _mean_or_zero(values: Sequence[int]) -> float:
    return sum(values) / len(values) if values else 0.0


class AspectAnnotation(MetricInput):
    """One possible aspect of the turn's topic, as annotated by the judge."""

    aspect: str = Field(min_length=1, description="Aspect name, unique within the topic.")
    personalized: bool = Field(description="Relevant to the user's personal profile (member of A'_per).")
    words: int | None = Field(
        default=None,
        ge=1,
        description="Words of response content about this aspect; null when the response does not cover it.",
    )
    content: str | None = Field(
        default=None,
        description="Alternatively, the response content about this aspect; words are counted by whitespace "
        "split as in the authors' code. Empty or null when not covered.",
    )

    @model_validator(mode="after")
    def _words_from_content(self) -> AspectAnnotation:
        if self.content is not None and self.content.strip():
            counted = len(self.content.split())
            if self.words is not None and self.words != counted:
                raise ValueError(f"words={self.words} but content has {counted} words")
            self.words = counted
        return self


class AEPDInput(MetricInput):
    aspects: list[AspectAnnotation] = Field(
        min_length=1, description="Every possible aspect of the topic (A'_all); covered ones carry words or content."
    )

    @field_validator("aspects")
    @classmethod
    def _unique_aspect_names(cls, aspects: list[AspectAnnotation]) -> list[AspectAnnotation]:
        seen: set[str] = set()
        for annotation in aspects:
            if annotation.aspect in seen:
                raise ValueError(f"aspect {annotation.aspect!r} is listed twice")
            seen.add(annotation.aspect)
        return aspects


class AEPDResult(MetricResult):
    possible_aspects: int = Field(description="|A'_all(t)|")
    possible_personalized: int = Field(description="|A'_per(t, u)|")
    turn_aspects: int = Field(description="|A_all(T, t)|")
    turn_personalized: int = Field(description="|A_per(T, t, u)|")
    pp: float = Field(description="PP(T, t, u), Eq. 1")
    pp_general: float = Field(description="PP'(t, u), Eq. 2")
    npp: float = Field(description="NPP, Eq. 3")
    l_all: int = Field(description="L_all, Eq. 4")
    l_per: float = Field(description="L_per, Eq. 5")
    l_nonper: float = Field(description="L_nonper, Eq. 6")
    npcl: float = Field(description="NPCL, Eq. 7")
    p_score: float = Field(description="P_score = NPP x NPCL, Eq. 8")
    ar: float = Field(description="AR, Eq. 9")
    rnss: float = Field(description="RNSS, Eq. 13")
    clu: float = Field(description="CLU, Eq. 14")
    d_score: float = Field(description="D_score = AR x CLU, Eq. 15")


def aepd_scores(annotated: AEPDInput) -> AEPDResult:
    aspects = annotated.aspects
    covered = [(a.personalized, a.words) for a in aspects if a.words is not None]
    lengths = [words for _, words in covered]
    personalized_lengths = [words for personalized, words in covered if personalized]
    other_lengths = [words for personalized, words in covered if not personalized]
    possible_personalized = sum(1 for a in aspects if a.personalized)

    pp = personalized_precision(len(personalized_lengths), len(covered))
    pp_general = personalized_precision(possible_personalized, len(aspects))
    npp = normalized_personalized_precision(pp, pp_general)
    npcl = normalized_personalized_content_length(personalized_lengths, other_lengths)
    ar = aspect_recall(len(covered), len(aspects))
    rnss = root_normalized_sum_of_squares(lengths)
    clu = content_length_uniformity(lengths)
    return AEPDResult(
        possible_aspects=len(aspects),
        possible_personalized=possible_personalized,
        turn_aspects=len(covered),
        turn_personalized=len(personalized_lengths),
        pp=pp,
        pp_general=pp_general,
        npp=npp,
        l_all=sum(lengths),
        l_per=_mean_or_zero(personalized_lengths),
        l_nonper=_mean_or_zero(other_lengths),
        npcl=npcl,
        p_score=npp * npcl,
        ar=ar,
        rnss=rnss,
        clu=clu,
        d_score=ar * clu,
    )
