"""Issue 41, item 6: `simulate check` fails the histories a reviewer would reject, each with its
reason, built from a real `simulate history` output (the scripted writer's, labels intact, every item
unique): every item a verbatim slice of the persona's own text; items contradicting the persona
(another country, another profession); the same sentences again with one number changed. The
output as written keeps passing."""

from __future__ import annotations

import json

from atelier.agents.user_sim.contradiction import offline_contradictions
from atelier.agents.user_sim.persona import persona_traits
from atelier.agents.user_sim.protocol import check_protocol
from atelier.benchmarks.loaders.pdr import ContextMessage, ContextRecord
from tests.cli_in_process import cli  # noqa: F401 (a fixture)
from tests.test_cli_e2e import env  # noqa: F401 (the CLI tests' fixture)
from tests.test_history_content_checks import rules, sound, user1, write  # noqa: F401 (fixtures)


def sliced(record: ContextRecord, attributes: dict) -> ContextRecord:
    """Every item an 8-word slice of the persona's own values, each a different one."""
    words = " ".join(t.value for t in persona_traits(attributes)).split()
    slices = iter(" ".join(words[i : i + 8]) for i in range(0, len(words) - 8))
    return record.model_copy(
        update={
            "memories": [m.model_copy(update={"title": "", "content": next(slices)}) for m in record.memories],
            "dialogues": [
                d.model_copy(
                    update={
                        "messages": [
                            ContextMessage(role="user", content=next(slices)),
                            ContextMessage(role="assistant", content=next(slices)),
                        ]
                    }
                )
                for d in record.dialogues
            ],
        }
    )


def contradicting(record: ContextRecord) -> ContextRecord:
    """Ten notes in which the person lives in another country and works another job."""
    said = [
        f"I live in São Paulo, Brazil, and as a nurse I work night shifts at the clinic; week {i} was long."
        for i in range(10)
    ]
    notes = [m.model_copy(update={"content": said[i]}) if i < 10 else m for i, m in enumerate(record.memories)]
    return record.model_copy(update={"memories": notes})


def repeated(record: ContextRecord) -> ContextRecord:
    """Every note the same three sentences, one number changed."""
    notes = [
        m.model_copy(
            update={
                "title": "Morning run",
                "content": f"I ran {i + 2} km along the canal this morning. My knees felt fine afterwards. "
                "I want to keep this routine going.",
            }
        )
        for i, m in enumerate(record.memories)
    ]
    return record.model_copy(update={"memories": notes})


def check(cli, tmp_path, env, name, record):
    done = cli("simulate", "check", "--contexts", str(write(tmp_path / f"{name}.jsonl", record)), env=env)
    return done.returncode, json.loads(done.stdout)["per_user"]["User1"]["protocol"], done.stderr


def test_each_bad_history_fails_with_its_reason_and_the_real_one_passes(cli, tmp_path, env, sound, user1):
    code, protocol, err = check(cli, tmp_path, env, "real", sound)
    assert code == 0 and protocol["ok"], err

    code, protocol, err = check(cli, tmp_path, env, "sliced", sliced(sound, user1))
    assert code == 3
    assert any(p.startswith("verbatim copy: ") and "at most 25%" in p for p in protocol["problems"]), protocol

    code, protocol, err = check(cli, tmp_path, env, "contradicting", contradicting(sound))
    assert code == 3
    [found] = [p for p in protocol["problems"] if p.startswith("contradiction in 10 item(s)")]
    assert "Brazil" in found and "Suzhou" in found

    code, protocol, err = check(cli, tmp_path, env, "repeated", repeated(sound))
    assert code == 3
    assert any(p.startswith(f"duplicate in {len(sound.memories) - 1} item(s)") for p in protocol["problems"]), protocol


def test_the_offline_rule_reads_first_person_statements_only(user1):
    found = offline_contradictions(
        user1,
        [
            ("a", "I live in Berlin now."),
            ("b", "I'd love to visit Brazil someday."),
            ("c", "I'm a nurse at the city hospital."),
            ("d", "As a student in Suzhou I study algorithms."),
            ("e", "I'm 45 years old."),
            ("f", "I am 20 and busy with exams."),
        ],
    )
    assert sorted(found) == ["a", "c", "e"]


def test_a_model_judges_contradictions_when_one_is_given(user1, sound):
    first = sound.memories[0].id
    protocol = check_protocol(user1, sound, contradicted={first: "Occupation: says they are a retired pilot"})
    assert any(p.startswith(f"contradiction in 1 item(s): {first}") for p in protocol.problems)
