"""mylab_cases: a data set of its own — a loader function of one argument, the `LoadRequest`.

It returns cases in the `Case` schema (atelier.benchmarks.case): a user, their history and explicit
persona, the query, and gold that only judges see (here rubric aspects, so LaMP-QA's aspect judge
applies too). `[benchmark] name = "mylab.data:load"` names it; `limit`, `setting` and `seed` arrive
in the request (the loader may ignore them: the limit is applied to what it returns).
"""

from __future__ import annotations

from atelier.benchmarks.case import Case, Gold, MemorySnippet, Persona, Query, RubricAspect
from atelier.benchmarks.registry import LoadRequest

USERS = {
    "ana": (
        {"Basic Attributes": {"Occupation": "night-shift nurse", "Home": "Lyon"}, "Preferences": {"Diet": "vegan"}},
        [
            ("m1", "I sleep during the day and work three 12-hour night shifts a week.", "2025-01-10"),
            ("m2", "I am vegan and cook in batches on Sundays.", "2025-02-02"),
            ("m3", "My knees hurt after long runs, so I swim instead.", "2025-03-15"),
        ],
        [
            ("What should I eat before a night shift?", ["vegan options", "fits a night-shift schedule"]),
            ("How can I keep fit with my schedule?", ["low-impact exercise", "short sessions around shifts"]),
        ],
    ),
    "ben": (
        {"Basic Attributes": {"Occupation": "retired engineer", "Home": "Leeds"}, "Preferences": {"Style": "detailed"}},
        [
            ("m1", "I like detailed explanations with numbers.", "2025-01-04"),
            ("m2", "I am restoring a 1970s motorbike in my garage.", "2025-02-20"),
        ],
        [("How do I stop rust on an old motorbike frame?", ["step-by-step detail", "products with figures"])],
    ),
}


def load(request: LoadRequest) -> list[Case]:
    """Three questions of two users, with explicit personas, short histories and rubric aspects."""
    cases = []
    for user, (attributes, notes, questions) in USERS.items():
        history = [MemorySnippet(id=f"{user}:{i}", text=text, timestamp=day) for i, text, day in notes]
        for n, (question, aspects) in enumerate(questions, start=1):
            cases.append(
                Case(
                    id=f"{user}-{n}",
                    benchmark="mylab",
                    user_id=user,
                    setting=request.setting,
                    query=Query(text=question),
                    history=history,
                    persona=Persona(user_id=user, attributes=attributes),
                    gold=Gold(
                        information_need=f"{question} (for {attributes['Basic Attributes']['Occupation']})",
                        rubric_aspects=[RubricAspect(aspect=a, reason="the user said so") for a in aspects],
                    ),
                )
            )
    return cases
