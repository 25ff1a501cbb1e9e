"""Keys never reach the disk. A provider that echoes the key it was sent (the stub's `echo_key_on`)
fails one case's calls; the run is given the key each way a recipe or the command line can give it,
and no file of the run folder or of the Atelier cache holds the key afterwards, binary files included.
A command that crashes with the key on its command line leaves an error file without it."""

from __future__ import annotations

import base64
import contextlib
import json
import sqlite3
import string
import sys
import zlib
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from atelier.runs.cli import main
from tests.openai_stub import OpenAIStub

KEY = "sk-planted-3f9a7c2e5b1d4e6f8a0b2c4d6e8f0a1b"
ECHOED_ON = "running shoes"  # in the question of case tiny:1 only: preflight and the other cases pass


def recipe_text(base_url: str, key_line: str) -> str:
    roles = "\n".join(
        f'[models.{role}]\nmodel = "openai/atelier-stub"\napi_base = "{base_url}"\nmax_retries = 0\n{key_line}\n'
        for role in ("system", "judge")
    )
    return f"""name = "t"
[benchmark]
name = "tiny"
{roles}
[[systems]]
name = "none"
memory = {{ backend = "none" }}
[[judges]]
name = "lampqa_aspects"
"""


def atelier(capsys, monkeypatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["atelier", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main()
    out, err = capsys.readouterr()
    return exited.value.code or 0, out, err


def _cells(path: Path) -> list[bytes]:
    """Every value of every table of an SQLite file, and each one zlib-compressed, decompressed
    (checkpoints compress what they store: a plain search of the file would miss it)."""
    out = []
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                for value in row:
                    data = value if isinstance(value, bytes) else str(value).encode()
                    out.append(data)
                    with contextlib.suppress(zlib.error):
                        out.append(zlib.decompress(data))
    return out


def files_holding(needle: str, *roots: Path) -> list[Path]:
    """Every file under `roots` whose bytes hold `needle`, SQLite files' compressed values included."""
    found = []
    for path in (p for root in roots for p in sorted(root.rglob("*")) if p.is_file()):
        data = path.read_bytes()
        pieces = [data, *(_cells(path) if data.startswith(b"SQLite format 3\0") else [])]
        if any(needle.encode() in piece for piece in pieces):
            found.append(path)
    return found


def run_with_key(tmp_path, capsys, monkeypatch, key_line: str, *extra: str) -> tuple[Path, str]:
    cache = tmp_path / "cache"
    monkeypatch.setenv("ATELIER_CACHE_DIR", str(cache))
    with OpenAIStub(api_key=KEY, echo_key_on=ECHOED_ON) as stub:
        recipe = tmp_path / "recipe.toml"
        recipe.write_text(recipe_text(stub.base_url, key_line))
        code, _, err = atelier(
            capsys, monkeypatch, "run", str(recipe), "--no-progress", "--out", str(tmp_path / "run"), *extra
        )
        echoed = [r for r in stub.requests if r["behaviour"] == "refused 400"]
    assert echoed, "the stub never echoed the key: the test would prove nothing"
    assert code == 3, err  # tiny:1 failed with the echoing error, the other cases were scored
    results = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    failed = [r for r in results if r["status"] == "error"]
    assert [r["case_id"] for r in failed] == ["tiny:1"]
    assert "Authorization: Bearer sk-" in failed[0]["error"] and "[redacted]" in failed[0]["error"]
    return cache, err


def assert_nowhere(tmp_path: Path, cache: Path) -> None:
    assert (tmp_path / "run" / "checkpoints.sqlite").exists() and any(cache.rglob("*"))  # there was something to search
    assert files_holding(KEY, tmp_path / "run", cache) == []
    assert files_holding(KEY[:16], tmp_path / "run", cache) == []  # nor a key cut short (errors are clipped)


def test_a_key_in_the_recipe_is_in_no_file(tmp_path, capsys, monkeypatch):
    cache, _ = run_with_key(tmp_path, capsys, monkeypatch, f'api_key = "{KEY}"')
    assert_nowhere(tmp_path, cache)


def test_a_key_given_with_api_key_on_the_command_line_is_in_no_file(tmp_path, capsys, monkeypatch):
    cache, _ = run_with_key(tmp_path, capsys, monkeypatch, "", "--api-key", KEY)
    assert_nowhere(tmp_path, cache)


def test_a_key_named_by_api_key_env_is_in_no_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ATELIER_TEST_PLANTED", KEY)  # a name no rule would guess holds a key
    cache, _ = run_with_key(tmp_path, capsys, monkeypatch, 'api_key_env = "ATELIER_TEST_PLANTED"')
    assert_nowhere(tmp_path, cache)


# ------------------------------------------------------------------------------ error files

ENV_KEY = "tvly-planted-9e8d7c6b5a4f3e2d1c0b"


@pytest.mark.parametrize("flag", [["--api-key", KEY], [f"--api-key={KEY}"]])
def test_a_crash_keeps_its_traceback_but_not_the_keys_of_its_command_line(tmp_path, capsys, monkeypatch, flag):
    from atelier.runs.folder import recipe as recipe_module

    cache = tmp_path / "cache"
    monkeypatch.setenv("ATELIER_CACHE_DIR", str(cache))
    monkeypatch.setenv("SEARCH_SERVICE_API_KEY", ENV_KEY)  # named like a key: litellm or a web service reads it

    def broken(path):  # a bug whose message quotes both keys, the first cut where the error line clips it
        raise RuntimeError("x" * (300 - len("RuntimeError: ") - 20) + f"{KEY} then {ENV_KEY} in a bug")

    monkeypatch.setattr(recipe_module, "load_recipe", broken)
    recipe = tmp_path / "t.toml"
    recipe.write_text("name = 't'\n")
    code, _, err = atelier(capsys, monkeypatch, "run", str(recipe), *flag, "--no-progress")
    assert code == 1
    assert "(a bug; full traceback in " in err and KEY[:16] not in err
    [trace] = (cache / "errors").iterdir()
    text = trace.read_text()
    first = text.splitlines()[0]
    assert (
        first
        == f"atelier run {recipe} "
        + ("--api-key [redacted]" if len(flag) == 2 else "--api-key=[redacted]")
        + " --no-progress"
    )
    assert "Traceback (most recent call last)" in text and "in a bug" in text  # the traceback is all there,
    assert "sk-…[redacted] then tvl…[redacted]" in text  # but for the keys
    assert files_holding(KEY[:16], cache) == [] and files_holding(ENV_KEY[:16], cache) == []


def test_whatever_a_command_writes_leaves_out_the_key_of_its_command_line(tmp_path, capsys, monkeypatch):
    """Not only runs: any command's writers (a gateway's ledger, a simulation's files) get the keys
    its command line gives."""
    from atelier.benchmarks.common.errors import ConfigError
    from atelier.runs.folder import recipe as recipe_module
    from atelier.runs.folder.results import write_json_atomic

    def writes_then_refuses(path):
        write_json_atomic(tmp_path / "written.json", {"error": f"the provider said {KEY}"})
        raise ConfigError(f"refused with key {KEY}")

    monkeypatch.setattr(recipe_module, "load_recipe", writes_then_refuses)
    code, _, err = atelier(capsys, monkeypatch, "run", str(tmp_path / "r.toml"), "--api-key", KEY, "--no-progress")
    assert code == 2 and err.strip() == "error: refused with key sk-…[redacted]"
    assert json.loads((tmp_path / "written.json").read_text()) == {"error": "the provider said sk-…[redacted]"}


# ------------------------------------------------------------------------------ the redactor


def test_a_key_is_blanked_whole_escaped_or_cut_short_and_nothing_else_is():
    from atelier.benchmarks.common.redaction import Redactor

    redactor = Redactor([KEY, 'sk-q"uo<te>-key-000'])
    assert redactor.redact(f"Incorrect API key provided: {KEY}.") == "Incorrect API key provided: sk-…[redacted]."
    assert redactor.redact(json.dumps({"error": 'key sk-q"uo<te>-key-000'})) == '{"error": "key sk-…[redacted]"}'
    assert redactor.redact("<p>sk-q&quot;uo&lt;te&gt;-key-000</p>") == "<p>sk-…[redacted]</p>"
    assert redactor.redact("<p>sk-q&#34;uo&lt;te&gt;-key-000</p>") == "<p>sk-…[redacted]</p>"  # jinja's escaping
    clipped = f"refused: {KEY}"[:30]  # an error clipped to its first 30 characters
    assert redactor.redact(clipped) == "refused: sk-…[redacted]"
    assert redactor.redact(json.dumps({"error": clipped})) == '{"error": "refused: sk-…[redacted]"}'
    # another key that merely starts alike, and text that is no key, are left alone
    other = "sk-planted-3f9a7c2e5b1d4e6f8a0b2c4d6e8f0XYZ"
    assert redactor.redact(other) == other and redactor.redact("sk-plant") == "[redacted]"
    assert redactor.redact("sk-plantedness") == "sk-plantedness"
    assert redactor.redact("nothing secret here") == "nothing secret here"


def test_placeholders_shorter_than_a_key_are_not_secrets():
    from atelier.benchmarks.common.redaction import Redactor

    redactor = Redactor(["none", "EMPTY", "sk-x", "sk-local"])
    assert redactor.secrets == {"sk-local"}
    assert redactor.redact("system none, key EMPTY") == "system none, key EMPTY"


def test_bytes_are_blanked_byte_for_byte_so_a_serialized_value_still_loads():
    from atelier.benchmarks.common.redaction import Redactor
    from atelier.graphs.serde import serializer

    serde = serializer()
    kind, data = serde.dumps_typed({"error": f"refused: {KEY}", "tokens": [3, 4]})
    blanked = Redactor([KEY]).redact_bytes(data)
    assert len(blanked) == len(data) and KEY.encode() not in blanked
    assert serde.loads_typed((kind, blanked)) == {"error": "refused: " + "*" * len(KEY), "tokens": [3, 4]}
    cut = f"refused: {KEY}"[:25].encode()
    assert Redactor([KEY]).redact_bytes(cut + b"\xa5") == b"refused: " + b"*" * 16 + b"\xa5"


def test_a_checkpoint_holds_no_key(tmp_path):
    import asyncio

    from atelier.benchmarks.common.redaction import Redactor
    from atelier.graphs.persistence import run_checkpointer

    async def write() -> None:
        async with run_checkpointer(tmp_path, redactor=Redactor([KEY])) as saver:
            config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            checkpoint = {
                "v": 1,
                "id": "1",
                "ts": "2025-01-01T00:00:00+00:00",
                "channel_values": {"error": f"refused: {KEY}", "long": f"refused: {KEY} " + "x" * 4000},
                "channel_versions": {},
                "versions_seen": {},
                "pending_sends": [],
            }
            saved = saver.put(config, checkpoint, {"source": "loop", "note": KEY}, {})
            saver.put_writes(saved, [("__error__", RuntimeError(f"refused: {KEY}"))], "task")

    asyncio.run(write())
    assert files_holding(KEY[:16], tmp_path) == []
    assert files_holding("refused: " + "*" * len(KEY), tmp_path) == [tmp_path / "checkpoints.sqlite"]


def test_the_command_line_loses_the_values_of_its_key_options():
    from atelier.benchmarks.common.redaction import Redactor, key_flag_values

    argv = ["run", "r.toml", "--api-key", KEY, "--token=tok-0123456789", "--model", "m"]
    assert key_flag_values(argv) == {KEY, "tok-0123456789"}
    assert Redactor.for_command_line(argv, {}).redact_argv(argv) == [
        "run",
        "r.toml",
        "--api-key",
        "[redacted]",
        "--token=[redacted]",
        "--model",
        "m",
    ]


def test_variables_named_like_keys():
    from atelier.benchmarks.common.redaction import is_key_name, key_variables

    for name in (
        "OPENAI_API_KEY",
        "ATELIER_API_KEY",
        "TAVILY_API_KEY",
        "HF_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "DB_PASSWORD",
        "api_key",
        "token",
        "Authorization",
        "MY_APIKEY",
    ):
        assert is_key_name(name), name
    for name in ("TOKENIZERS_PARALLELISM", "HF_TOKEN_FILE", "max_tokens", "api_key_env", "GPG_KEY", "PATH", "key"):
        assert not is_key_name(name), name
    assert key_variables({"OPENAI_API_KEY": "sk-a", "HF_TOKEN": "hf_x", "PATH": "/bin"}) == {"sk-a", "hf_x"}


def test_every_documented_key_variable_of_a_web_service_is_named_like_a_key():
    """Outside a run (the CLI's error file) keys are found by the variable's name: each web service's
    documented variable must match, or its key would be missed."""
    from atelier.benchmarks.common.redaction import is_key_name
    from atelier.tools.api_keys import KeyedServiceConfig
    from atelier.tools.readers.registry import READERS
    from atelier.tools.search.registry import PROVIDERS

    options = [cls.Options for registry in (PROVIDERS, READERS) for cls in (registry.get(n) for n in registry.names())]
    keyed = [o for o in options if issubclass(o, KeyedServiceConfig)]
    assert {o.api_key_env for o in keyed} >= {"TAVILY_API_KEY", "SERPER_API_KEY", "BRAVE_API_KEY", "JINA_API_KEY"}
    assert all(is_key_name(o.api_key_env) for o in keyed)


def test_a_run_knows_every_key_its_recipe_gives_or_names(monkeypatch):
    from atelier.benchmarks.common.redaction import Redactor
    from atelier.runs.folder.recipe import parse_recipe

    monkeypatch.setenv("ATELIER_TEST_JUDGE_KEY", "judge-key-0123456789")  # named by api_key_env only
    monkeypatch.setenv("TAVILY_API_KEY", ENV_KEY)  # the web provider's documented variable
    recipe = parse_recipe(
        {
            "name": "t",
            "benchmark": {"name": "tiny"},
            "models": {
                "system": {
                    "model": "openai/m",
                    "api_key": KEY,
                    "extra": {"extra_headers": {"Authorization": "Bearer hdr-key-0123456789"}},
                },
                "judge": {"model": "openai/m", "api_key_env": "ATELIER_TEST_JUDGE_KEY"},
            },
            "systems": [
                {
                    "name": "none",
                    "memory": {"backend": "none"},
                    "models": {"system": {"model": "openai/m", "api_key": "system-own-key-0123"}},
                }
            ],
            "judges": [{"name": "lampqa_aspects"}],
            "web": {
                "provider": "tavily",
                "provider_options": {"api_key": "tavily-recipe-key-0123"},
                "reader": "jina",
                "reader_options": {"api_key": "jina-recipe-key-0123"},
            },
        }
    )
    secrets = Redactor.for_settings(recipe).secrets
    assert {
        KEY,
        "judge-key-0123456789",
        "hdr-key-0123456789",
        "system-own-key-0123",
        ENV_KEY,
        "tavily-recipe-key-0123",
        "jina-recipe-key-0123",
    } <= secrets


def test_writers_use_the_run_s_redactor_and_the_environment_s_outside_a_run(tmp_path, monkeypatch):
    from atelier.benchmarks.common.redaction import Redactor, active_redactor, redacting
    from atelier.runs.folder.results import write_json_atomic

    monkeypatch.setenv("SOME_SERVICE_TOKEN", ENV_KEY)
    assert active_redactor().secrets >= {ENV_KEY}
    with redacting(Redactor([KEY])):
        write_json_atomic(tmp_path / "in-run.json", {"error": f"{KEY} {ENV_KEY}"})
    write_json_atomic(tmp_path / "outside.json", {"error": f"{KEY} {ENV_KEY}"})
    assert json.loads((tmp_path / "in-run.json").read_text())["error"] == f"sk-…[redacted] {ENV_KEY}"
    assert json.loads((tmp_path / "outside.json").read_text())["error"] == f"{KEY} tvl…[redacted]"


# ------------------------------------------------------------------------------ every place a key is given

QUERY_KEY = "qk-planted+query/key=0a1b2c3d4e5f"  # characters that URL-encoding changes
HEADER_KEYS = {
    "api-key": "hk-planted-azure-7c6b5a4f3e2d1c0b",
    "X-Api-Key": "hk-planted-anthropic-9f8e7d6c5b4a",
    "x-goog-api-key": "hk-planted-google-1a2b3c4d5e6f7a",
}


def written_forms(key: str) -> list[str]:
    """The key as a careless writer or a repeating model spells it: as is, cut short, URL-encoded, and
    the characters base64 gives it alone or after `user:` (computed here, not by the redactor)."""
    forms = [key, key[:16], quote(key, safe="")]
    for prefix in (b"", b"user:"):
        encoded = base64.b64encode(prefix + key.encode()).decode()
        start = -(-len(prefix) * 8 // 6)
        forms.append(encoded[start : start + 16])
    return forms


def run_quoting_keys(tmp_path, capsys, monkeypatch, inline: str, query: str, headers: dict[str, str]):
    """A run given `inline` as its key, `query` in api_base's query and `headers`, whose model repeats
    every credential it was sent (`quote_keys_on`): (the cache folder, what it printed on stdout, on stderr)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ATELIER_CACHE_DIR", str(cache))
    given = ", ".join(f'"{name}" = "{value}"' for name, value in headers.items())
    with OpenAIStub(quote_keys_on=ECHOED_ON) as stub:
        recipe = tmp_path / "recipe.toml"
        text = recipe_text(f"{stub.base_url}?api-key={quote(query, safe='')}", f'api_key = "{inline}"')
        recipe.write_text(
            text.replace("max_retries = 0\n", f"max_retries = 0\nextra = {{ extra_headers = {{ {given} }} }}\n")
        )
        code, out, err = atelier(
            capsys, monkeypatch, "run", str(recipe), "--no-progress", "--out", str(tmp_path / "run")
        )
        quoted = [
            r for r in stub.requests if ECHOED_ON in json.dumps(r["body"]) and not r["body"].get("response_format")
        ]
    assert code in (0, 3), err
    assert quoted, "the model never repeated the keys: the test would prove nothing"
    assert (tmp_path / "run" / "config.json").exists() and (tmp_path / "run" / "report.html").exists()
    return cache, out, err


def test_a_key_in_the_api_base_query_or_in_any_header_and_its_encoded_echoes_are_in_no_file(
    tmp_path, capsys, monkeypatch
):
    """The key is given inline, in api_base's query string and in three provider headers; the model
    answers case tiny:1 with every credential it was sent, plain, URL-encoded and in base64. No file
    of the run (config.json, results, ledger, report, checkpoints), of the shared cache, and nothing
    printed holds any of them in any of those forms."""
    cache, out, err = run_quoting_keys(tmp_path, capsys, monkeypatch, KEY, QUERY_KEY, HEADER_KEYS)
    results = (tmp_path / "run" / "results.jsonl").read_text()
    assert "I was given: plain sk-…[redacted]" in results  # the echo is there, its keys are not
    for key in (KEY, QUERY_KEY, *HEADER_KEYS.values()):
        for form in written_forms(key):
            assert files_holding(form, tmp_path / "run", cache) == [], (key, form)
            assert form not in out and form not in err


def test_a_key_a_provider_quotes_in_a_preflight_refusal_is_never_printed(tmp_path, capsys, monkeypatch):
    """A provider that quotes a wrong key in its 401: `recipe check --preflight` and `run`'s preflight
    report the refusal in one line each, without the key."""
    monkeypatch.setenv("ATELIER_CACHE_DIR", str(tmp_path / "cache"))
    with OpenAIStub(api_key="sk-the-right-key-000000000000", echo_401=True) as stub:
        recipe = tmp_path / "recipe.toml"
        recipe.write_text(recipe_text(stub.base_url, f'api_key = "{KEY}"'))
        checked = atelier(capsys, monkeypatch, "recipe", "check", str(recipe), "--preflight")
        ran = atelier(capsys, monkeypatch, "run", str(recipe), "--no-progress", "--out", str(tmp_path / "run"))
        refused = [r for r in stub.requests if r["behaviour"] == "refused 401"]
    assert refused, "the provider never refused the key: the test would prove nothing"
    for code, out, err in (checked, ran):
        assert code == 2, err
        assert "Incorrect API key provided: sk-…[redacted]" in err
        assert KEY[:16] not in out + err


def test_the_shared_cache_never_stores_a_key_an_answer_quotes(tmp_path):
    from atelier.agents.models.cache import ResponseCache
    from atelier.benchmarks.common.redaction import Redactor, redacting

    store = ResponseCache(tmp_path / "llm")
    with redacting(Redactor([KEY])):
        store.put("k", {"content": f"your key is {KEY}", "messages": [{"role": "user", "content": KEY}]})
    store.close()
    assert files_holding(KEY[:16], tmp_path) == []
    assert ResponseCache(tmp_path / "llm").get("k")["content"] == "your key is sk-…[redacted]"


def test_keys_in_urls_and_headers_are_found_and_their_encodings_blanked():
    from atelier.benchmarks.common.redaction import Redactor, key_variables, secrets_in, url_secrets

    assert url_secrets(f"https://x.example/v1?api-version=2024&api-key={quote(QUERY_KEY, safe='')}") >= {QUERY_KEY}
    assert url_secrets("https://user:pa55word-0123@x.example/?key=AIzaSyA-0123456789&sig=abc") >= {
        "pa55word-0123",
        "AIzaSyA-0123456789",
    }
    assert url_secrets("https://x.example/v1?api-version=2024-10-21&model=gpt") == set()
    settings = {"extra": {"extra_headers": {**HEADER_KEYS, "User-Agent": "atelier/0.1 (research)"}}}
    assert secrets_in(settings) >= set(HEADER_KEYS.values())
    assert "atelier/0.1 (research)" not in secrets_in(settings)
    assert key_variables({"OPENAI_API_BASE": f"https://x.example/?api-key={QUERY_KEY}"}) >= {QUERY_KEY}
    redactor = Redactor([KEY])
    for form in written_forms(KEY):
        assert form not in redactor.redact(f"said: {form}..."), form
    assert redactor.redact("nothing secret here") == "nothing secret here"


def every_form(key: str) -> list[str]:
    """`written_forms`, and every character a JSON `\\uXXXX` escape or an HTML character reference."""
    return [
        *written_forms(key),
        "".join(f"\\u{ord(c):04x}" for c in key),
        "".join(f"&#{ord(c)};" for c in key),
    ]


# keys a header can carry, of the alphabets keys come in: base64-style and AWS secret keys hold / + =
header_keys = st.text(
    st.sampled_from(string.ascii_letters + string.digits + "/+=_-."), min_size=20, max_size=40
).filter(lambda k: len(set(k)) >= 8 and not k.startswith(("+", "=")))


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inline=header_keys, query=header_keys, header=header_keys)
@example(
    inline="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", query="ab+cd/ef=gh_ij-kl.mn0p", header="Zm9vYmFy/+=_-.Zm9vYmFy"
)
def test_a_generated_key_is_in_no_file_of_a_run(tmp_path_factory, capsys, monkeypatch, inline, query, header):
    """Generated keys, given inline, in api_base's query and in a provider header, which the model
    repeats in every encoding (`quote_keys_on`): in no sink — what is printed, config.json, results,
    ledger, report.html, checkpoints, the shared cache."""
    tmp_path = tmp_path_factory.mktemp("sinks")
    cache, out, err = run_quoting_keys(tmp_path, capsys, monkeypatch, inline, query, {"X-Api-Key": header})
    assert "I was given: plain " in (tmp_path / "run" / "results.jsonl").read_text()
    for key in (inline, query, header):
        for form in every_form(key):
            assert files_holding(form, tmp_path / "run", cache) == [], (key, form)
            assert form not in out and form not in err, (key, form)
