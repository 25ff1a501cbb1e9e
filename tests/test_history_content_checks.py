"""Checks that read what a history says, and can fail: item content (empty, template echo, a name or
role label as a dialogue turn, duplicates, the wrong language), protocol figures from what was
written (not from the trait labels the plan assigned), and the reversibility gate."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from atelier.agents.models.gateway import Gateway
from atelier.agents.user_sim import HistoryOptions, check_protocol, synthesize_history
from atelier.agents.user_sim.history import history_rules
from atelier.agents.user_sim.persona import persona_traits, preference_tags
from atelier.agents.user_sim.protocol import ContentRules, content_problems, item_problems, language_problem
from atelier.agents.user_sim.reversibility import ReversibilityReport, reversibility_problems
from atelier.benchmarks.loaders.pdr import (
    ContextClick,
    ContextDialogue,
    ContextMemory,
    ContextMessage,
    ContextQuery,
    ContextRecord,
    ContextSearch,
    read_language,
)
from atelier.runs.studies.simulate_history import history_outcome
from tests.cli_in_process import cli  # noqa: F401 (a fixture)
from tests.test_cli_e2e import atelier, env  # noqa: F401 (env: the CLI tests' fixture)

NOTE = "Spent the evening at the Suzhou library going through my algorithms homework before the Friday deadline."
ASK = "Can you find me a quiet place near campus where I can study for my exam on Thursday?"
REPLY = "The reading room on the third floor of the east library is open until eleven and is usually quiet."


@pytest.fixture(scope="module")
def user1() -> dict:
    return read_language("en").personas["User1"].attributes


@pytest.fixture(scope="module")
def rules(user1) -> ContentRules:
    return history_rules(user1, "en")


def memory(title: str = "Library evening", content: str = NOTE, **fields) -> ContextMemory:
    return ContextMemory(id=fields.pop("id", "m1"), title=title, content=content, **fields)


def dialogue(*turns: tuple[str, str], **fields) -> ContextDialogue:
    messages = [
        ContextMessage(role=r, content=t) for user, reply in turns for r, t in (("user", user), ("assistant", reply))
    ]
    return ContextDialogue(
        id=fields.pop("id", "d1"), title=fields.pop("title", "Study spot"), messages=messages, **fields
    )


# --------------------------------------------------------------------------- one item


def test_a_sound_item_passes_every_check(rules):
    assert item_problems(memory(), rules) == []
    assert item_problems(dialogue((ASK, REPLY)), rules) == []
    search = ContextSearch(
        id="s1",
        queries=[
            ContextQuery(
                query="quiet study places suzhou university",
                clicked=[ContextClick(title="Top 10 study spots in Suzhou")],
            )
        ],
    )
    assert item_problems(search, rules) == []


@pytest.mark.parametrize(
    "title, content, expected",
    [
        ("A clear, short title.", NOTE, "template echo: title 'A clear, short title.' is the schema's own text"),
        ("Library", "The note itself", "template echo: content 'The note itself' is the schema's own text"),
        (
            "Library",
            "The note itself, first person, 1-3 sentences. The note is a summary of the day.",
            "repeats the schema's 'the note itself first person 1-3 sentences'",
        ),
        ("MemoryDraft", NOTE, "template echo: title 'MemoryDraft' is the schema's own text"),
        ("Library", "Show the trait through concrete behaviour, choices, questions and details.", "copies the prompt"),
        (
            "Library",
            "This is a JSON object that contains the items listed above, written in JSON format.",
            "is about the request, not the person (json, object, items, above, written)",
        ),
        (
            "Notes",
            "Each item must clearly reflect the listed source",
            "is about the request, not the person (item, clearly, reflect, source)",
        ),
        ("Library", "Dinner with <name> at the usual place.", "holds a placeholder ('<name>')"),
        ("[insert title]", NOTE, "holds a placeholder ('[insert title]')"),
        ("DialogueSyntax", NOTE, "'DialogueSyntax' is an identifier made of the schema's words"),
    ],
)
def test_a_field_holding_the_request_is_a_template_echo(rules, title, content, expected):
    problems = " | ".join(item_problems(memory(title, content), rules))
    assert problems.startswith("template echo:") and expected in problems


@pytest.mark.parametrize(
    "user, reply, expected",
    [
        ("Liam Chen", REPLY, "turn 1 (user) 'Liam Chen' is a bare name"),
        (ASK, "The Assistant", "turn 2 (assistant) 'The Assistant' is a role label"),
        ("Li Chen", REPLY, "turn 1 (user) 'Li Chen' is the persona's name"),
        (ASK, "assistant", "turn 2 (assistant) 'assistant' is a role label"),
    ],
)
def test_a_name_or_role_label_standing_in_for_a_turn_is_found(rules, user, reply, expected):
    assert f"name or role as content: {expected}" in item_problems(dialogue((user, reply)), rules)


def test_short_real_turns_are_not_names(rules):
    assert (
        item_problems(dialogue((ASK, "Sure."), ("Thank you!", "You're welcome, good luck with the exam.")), rules) == []
    )
    # nor are brand names in titles, or a note naming a book in brackets
    assert item_problems(memory("YouTube", NOTE), rules) == []
    assert (
        item_problems(memory("PlayStation deals", "Reading <Deep Learning with Python> before the exam."), rules) == []
    )


def test_an_assistant_repeating_the_user_is_a_duplicate(rules):
    assert "duplicate: the assistant repeats the user's turn" in item_problems(dialogue((ASK, ASK)), rules)


def test_a_field_saying_a_sentence_twice_is_a_loop(rules):
    looping = (
        "This is a story about Liam Chen and Jordan Brown. I like it. This is a story about Liam Chen and Jordan Brown."
    )
    assert item_problems(memory(content=looping), rules) == [
        "duplicate: content says 'This is a story about Liam Chen and Jordan Brown' twice"
    ]
    assert item_problems(memory(content="Thank you. Thank you. " + NOTE), rules) == []  # short ones are speech


def test_a_note_that_is_only_a_name_says_nothing(rules):
    assert item_problems(memory("Weekend", "Mike Brown,"), rules) == [
        "name or role as content: content 'Mike Brown,' is a bare name"
    ]


def test_empty_fields_and_repeated_items_are_found(rules):
    assert item_problems(memory(content="  "), rules) == ["empty: content"]
    assert item_problems(dialogue((ASK, " ")), rules) == ["empty: turn 2 (assistant)"]
    assert "duplicate: the same user turn twice in one dialogue" in item_problems(
        dialogue((ASK, REPLY), (ASK, REPLY)), rules
    )
    nearly = NOTE.replace("Friday", "Thursday")
    found = content_problems(
        [
            ("m1", memory(id="m1")),
            ("m2", memory(id="m2", title=" library  EVENING ")),
            ("m3", memory(id="m3", title="Another evening", content=ASK)),
            ("m4", memory(id="m4", content=nearly)),
            ("m5", memory(id="m5", title="Exam week", content=REPLY)),
        ],
        rules,
    )
    # the first is kept; case and spacing do not make a new item, nor does a passage of ten words repeated
    assert found == {"m2": ["duplicate: of m1"], "m4": ["duplicate: of m1"]}


@pytest.mark.parametrize(
    "text, language, expected",
    [
        (NOTE, "en", None),
        (
            "Pasé la tarde en la biblioteca con mis deberes de algoritmos, que son para el viernes.",
            "en",
            "expected English, reads as Spanish",
        ),
        (
            "J'ai passé la soirée à la bibliothèque sur mes devoirs, pour vendredi et pas plus tard.",
            "en",
            "expected English, reads as French",
        ),
        ("今天晚上我在图书馆写算法作业，周五之前要交，还好赶完了。", "en", "expected English, 0% Latin-script words"),
        ("今天晚上我在图书馆写算法作业，周五之前要交，还好赶完了。", "zh", None),
        (NOTE, "zh", "expected Chinese, mostly Latin script (0% CJK)"),
        (
            "图书馆算法作业周五截止苏州大学东区阅览室三楼晚上十一点关门考试复习计划表格",
            "zh",
            "expected Chinese, few Chinese function words",
        ),
    ],
)
def test_the_language_is_the_expected_one(text, language, expected):
    found = language_problem(text, language)
    assert (found is None) if expected is None else (found is not None and found.startswith(expected)), found


def test_a_short_keyword_text_is_not_judged_on_function_words():
    assert language_problem("algorithms homework deadline", "en") is None
    assert language_problem("Suzhou", "en") is None


# --------------------------------------------------------------------------- the record


@pytest.fixture(scope="module")
def sound(user1) -> ContextRecord:
    """A synthesized history that passes the content checks (the scripted writer: persona words)."""
    history = asyncio.run(synthesize_history(Gateway(), "User1", user1, HistoryOptions(seed=3)))
    assert history.complete and not [e for e in history.events if e.kind != "accepted"]
    return history.record


def echoing(record: ContextRecord) -> ContextRecord:
    """The record as SmolLM2 wrote it: the schema's field descriptions in every field, names as turns;
    ids, dates and trait labels intact."""
    return record.model_copy(
        update={
            "memories": [
                m.model_copy(
                    update={
                        "title": "A clear, short title.",
                        "content": "The note itself, first person, 1-3 sentences.",
                    }
                )
                for m in record.memories
            ],
            "dialogues": [
                d.model_copy(
                    update={
                        "messages": [
                            ContextMessage(role="user", content="Liam Chen"),
                            ContextMessage(role="assistant", content="The Assistant"),
                        ]
                    }
                )
                for d in record.dialogues
            ],
        }
    )


def test_items_per_tag_and_the_conversational_share_count_what_was_written(user1, rules, sound):
    good = check_protocol(user1, sound, rules=rules)
    assert good.ok and good.counted_items == good.items and min(good.items_per_tag.values()) == 5

    bad = check_protocol(user1, echoing(sound), rules=rules)
    assert not bad.ok and bad.counted_items == 0 and set(bad.items_per_tag.values()) == {0}
    assert not bad.unlinked_items  # every label is still a facet of the persona: the labels are not what counts
    # the memories echo (and repeat one another), the dialogues have names for turns
    assert bad.content_failure_counts == {
        "template echo": bad.memories,
        "name or role as content": bad.dialogues,
        "duplicate": bad.memories - 1,
    }
    problems = " | ".join(bad.problems)
    assert f"template echo in {bad.memories} item(s)" in problems and "'A clear, short title.'" in problems
    assert "20 preference tag(s) with fewer than 5 items that pass the content checks" in problems

    # dialogues failing their checks leave the share to the memories
    half = sound.model_copy(update={"dialogues": echoing(sound).dialogues})
    figures = check_protocol(user1, half, rules=rules)
    assert figures.counted_items == len(sound.memories) and figures.conversational_share == 0.0
    assert "conversational share 0% of the counted items is outside 20%-50%" in " | ".join(figures.problems)


def test_with_the_inverse_pass_items_count_for_the_facets_it_cited(user1, rules, sound):
    tag = preference_tags(persona_traits(user1))[0]
    labelled = [i for i in [*sound.memories, *sound.dialogues] if i.trait == tag.path]
    other = [i for i in [*sound.memories, *sound.dialogues] if i.trait != tag.path]
    attribution = {
        tag.path: [i.id for i in labelled[:3]] + [other[0].id, "User1:m999"]
    }  # an unknown id counts for nothing
    figures = check_protocol(user1, sound, rules=rules, attribution=attribution)
    assert figures.counted_by == "attribution" and figures.items_per_tag[tag.path] == 4
    assert figures.counted_items == 4 and len(figures.unlinked_items) == figures.items - 4
    assert "cited by the inverse pass for no facet" in " | ".join(figures.problems)


# --------------------------------------------------------------------------- the reversibility gate


def report(verdicts: dict[str, str]) -> ReversibilityReport:
    counts = {v: sum(x == v for x in verdicts.values()) for v in ("recovered", "partial", "missed", "contradicted")}
    return ReversibilityReport(
        traits=len(verdicts), counts=counts, per_trait=verdicts, preference_tags=0, preference_recovered=0
    )


def test_the_gate_fails_below_the_minimum_and_on_any_contradicted_facet():
    good = report({"A": "recovered", "B": "recovered", "C": "partial"})
    assert reversibility_problems(good, 0.5) == []
    assert reversibility_problems(good, 0.7) == ["reversibility: 66.7% of 3 facets recovered, below the minimum 70%"]
    contradicted = report({"A": "recovered", "B": "recovered", "C": "contradicted"})
    assert reversibility_problems(contradicted, 0.5) == ["reversibility: 1 contradicted facet(s): C"]
    low = report(
        {"A": "recovered", **{f"F{i}": "missed" for i in range(110)}, "X": "contradicted", "Y": "contradicted"}
    )
    assert reversibility_problems(low, 0.5) == [
        "reversibility: 0.9% of 113 facets recovered, below the minimum 50%",
        "reversibility: 2 contradicted facet(s): X; Y",
    ]


def test_a_user_below_the_gate_makes_the_command_exit_3_naming_it_and_its_facets():
    def figures(problems):
        return {"protocol": {"problems": []}, "reversibility_problems": problems}

    passing = {"per_user": {"User1": figures([])}, "failed": {}, "overall": {"reversibility": {"problems": []}}}
    assert history_outcome(passing) == (0, ["users: 1 within the protocol, 0 failed (of 1)"])
    failing = {
        "per_user": {
            "User1": figures([]),
            "User2": figures(
                reversibility_problems(
                    report({"A": "recovered", **{f"F{i}": "missed" for i in range(110)}, "X": "contradicted"}), 0.5
                )
            ),
        },
        "failed": {},
        "overall": {
            "reversibility": {
                "problems": ["reversibility: 26.0% of 163 facets recovered over 2 user(s), below the minimum 50%"]
            }
        },
    }
    code, lines = history_outcome(failing)
    assert code == 3
    assert lines[0] == "users: 1 within the protocol, 1 breaking it, 0 failed (of 2)"
    assert lines[lines.index("reversibility gate:") + 1] == (
        "  User2: 0.9% of 112 facets recovered, below the minimum 50%; 1 contradicted facet(s): X"
    )
    assert lines[-1] == "overall reversibility: 26.0% of 163 facets recovered over 2 user(s), below the minimum 50%"


# --------------------------------------------------------------------------- `atelier simulate check`


def write(path: Path, record: ContextRecord) -> Path:
    path.write_text(json.dumps(record.model_dump(exclude_none=True)) + "\n")
    return path


@pytest.mark.battery
def test_simulate_check_fails_a_history_that_echoes_the_schema_and_passes_a_sound_one(tmp_path, env, sound):
    good = atelier("simulate", "check", "--contexts", str(write(tmp_path / "good.jsonl", sound)), env=env)
    assert good.returncode == 0, good.stderr
    assert good.stderr.splitlines()[0] == "users: 1 within the protocol, 0 failed (of 1)"

    bad = atelier("simulate", "check", "--contexts", str(write(tmp_path / "bad.jsonl", echoing(sound))), env=env)
    assert bad.returncode == 3, bad.stderr
    stderr = bad.stderr.splitlines()
    assert stderr[0] == "users: 0 within the protocol, 1 breaking it, 0 failed (of 1)"
    top = stderr[stderr.index("most common protocol problems:") + 1 :]
    assert any(
        line.startswith(f"  1 x template echo in {len(sound.memories)} item(s): User1:m001")
        and "'A clear, short title.'" in line
        for line in top
    ), top
    protocol = json.loads(bad.stdout)["per_user"]["User1"]["protocol"]
    assert set(protocol["items_per_tag"].values()) == {0} and not protocol["ok"]
    assert any("name or role as content" in p and "'Liam Chen' is a bare name" in p for p in protocol["problems"])


def test_simulate_check_holds_items_to_the_expected_language(cli, tmp_path, env, sound):
    zh = read_language("zh").personas
    user = next(iter(zh))
    record = sound.model_copy(update={"userid": user, "memories": [], "dialogues": [], "searches": []})
    record = record.model_copy(update={"memories": [memory(id=f"{user}:m001")]})
    done = cli(
        "simulate", "check", "--contexts", str(write(tmp_path / "zh.jsonl", record)), "--language", "zh", env=env
    )
    assert done.returncode == 3
    problems = json.loads(done.stdout)["per_user"][user]["protocol"]["problems"]
    assert any(
        p.startswith(f"language in 1 item(s): {user}:m001 (e.g. {user}:m001: expected Chinese") for p in problems
    )


@pytest.mark.battery
def test_simulate_check_with_the_inverse_pass_applies_the_gate(tmp_path, env, sound):
    path = write(tmp_path / "good.jsonl", sound)
    done = atelier("simulate", "check", "--contexts", str(path), "--reversibility", "--min-recovered", "0.9", env=env)
    assert done.returncode == 3, done.stderr
    stderr = done.stderr.splitlines()
    [named] = stderr[stderr.index("reversibility gate:") + 1 :][:1]
    assert named.startswith("  User1: ") and "facets recovered, below the minimum 90%" in named
    report = json.loads(done.stdout)
    assert report["dry_run"] is True and report["overall"]["reversibility"]["min_recovered"] == 0.9
    assert report["per_user"]["User1"]["protocol"]["counted_by"] == "attribution"
    contradicted = [
        p for p, v in report["per_user"]["User1"]["reversibility"]["per_trait"].items() if v == "contradicted"
    ]
    if contradicted:  # whatever the scripted checker said, each contradicted facet is named
        assert all(p in named for p in contradicted)
