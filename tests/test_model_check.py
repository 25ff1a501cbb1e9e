"""The model probe (`atelier model check`, a run's preflight) and `atelier bench model`, against the
stub server and the scripted model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from atelier.agents.models.gateway import Gateway
from atelier.agents.models.model_probe import probe_models
from atelier.agents.models.settings import ModelSettings
from atelier.agents.models.structured_output import MODES_FILE, ModeMemory
from atelier.runs.bench.model import ModelBenchSettings, run_model_bench
from atelier.runs.execution.model_check import probe_recipe, recipe_models
from atelier.runs.folder.recipe import parse_recipe
from tests.openai_stub import OpenAIStub

ROOT = Path(__file__).resolve().parent.parent


def _stub_settings(stub: OpenAIStub, **extra) -> ModelSettings:
    return ModelSettings(
        model="openai/stub-model",
        api_base=stub.base_url,
        api_key=extra.pop("api_key", "sk"),
        retry_backoff_s=0.01,
        timeout_s=20.0,
        **extra,
    )


async def test_the_probe_reports_reachability_mode_and_speed_per_distinct_model():
    ModeMemory.forget_process()
    with OpenAIStub(kind="llamacpp") as stub:
        settings = _stub_settings(stub)
        probes = await probe_models({"system": settings, "judge": settings, "user_sim": ModelSettings()})
        asked = [r["mode"] for r in stub.requests]
    remote, scripted = sorted(probes, key=lambda p: p.dry_run)
    assert remote.roles == ["system", "judge"] and scripted.roles == ["user_sim"] and scripted.dry_run
    assert remote.ok and remote.text.answer and remote.text.completion_tokens > 0 and remote.text.tokens_per_s > 0
    assert remote.structured.structured_mode == "json_object" and remote.structured.refused_modes == ["json_schema"]
    assert asked == ["none", "json_schema", "json_object"]  # one text probe, one structured probe (after one refusal)


async def test_a_probe_of_bad_credentials_fails_with_the_servers_message():
    with OpenAIStub(api_key="sk-right") as stub:
        [probe] = await probe_models({"judge": _stub_settings(stub, api_key="sk-wrong", max_retries=4)})
        assert len(stub.requests) == 1  # the text probe, not retried; the structured one would be refused alike
    assert not probe.ok and not probe.text.ok and "Incorrect API key" in probe.text.error
    assert not probe.structured.ok and (probe.structured.error or "").startswith("not asked: the text probe failed")


async def test_a_preflight_keeps_the_modes_it_found_in_the_run_folder(tmp_path):
    ModeMemory.forget_process()
    with OpenAIStub(kind="no_response_format") as stub:
        recipe = parse_recipe(
            {
                "name": "p",
                "benchmark": {"name": "tiny"},
                "models": {"judge": {"model": "openai/stub-model", "api_base": stub.base_url, "api_key": "k"}},
                "systems": [
                    {"name": "s", "memory": {"backend": "none"}, "models": {"system": {"model": "scripted?seed=3"}}}
                ],
            }
        )
        assert set(recipe_models(recipe)) == {"system", "judge", "user_sim", "s:system"}
        probes = await probe_recipe(recipe, run_dir=tmp_path)
    assert all(p.ok for p in probes)
    recorded = json.loads((tmp_path / MODES_FILE).read_text())
    assert recorded[f"openai/stub-model@{stub.base_url}"]["mode"] == "tool"


def test_model_check_cli_exits_non_zero_and_names_the_failure(tmp_path):
    env = {**os.environ, "ATELIER_CACHE_DIR": str(tmp_path / "cache")}
    with OpenAIStub(api_key="sk-right") as stub:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "atelier.runs.cli",
                "model",
                "check",
                "--model",
                "openai/gpt-4o-mini",
                "--api-base",
                stub.base_url,
                "--api-key",
                "sk-wrong",
                "--json",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 1, done.stderr
    [probe] = json.loads(done.stdout)
    assert probe["roles"] == ["system", "user_sim", "judge"]
    assert "authentication failed (HTTP 401" in probe["text"]["error"] and "Traceback" not in done.stderr


async def test_stream_timing_measures_the_first_token():
    with OpenAIStub() as stub:
        timing = await Gateway({"system": _stub_settings(stub)}).stream_timing(
            "system", [{"role": "user", "content": "Tell me about Lisbon trams and their fares."}]
        )
    assert timing.text.startswith("Stub model answer.") and timing.completion_tokens == len(timing.text.split())
    assert 0 < timing.ttft_ms <= timing.total_ms


async def test_bench_model_figures_on_the_stub_and_the_scripted_model():
    with OpenAIStub() as stub:
        figures = await run_model_bench(_stub_settings(stub), ModelBenchSettings(requests=2, max_tokens=32))
        plain = [r for r in stub.requests if not r["body"].get("stream")]
        assert len(plain) == 3 and len(stub.requests) == 5  # warm-up + 2 plain + 2 streamed
        assert len({json.dumps(r["body"]["messages"]) for r in stub.requests}) == 5  # every prompt distinct
    assert figures["requests"] == 2 and figures["dry_run"] is False
    assert figures["tokens_per_s"] > 0 and figures["ttft_ms"]["p50"] > 0 and figures["framework_share"] >= 0
    assert figures["framework_ms_total"] + figures["provider_ms_total"] > 0
    scripted = await run_model_bench(ModelSettings(model="scripted"), ModelBenchSettings(requests=1))
    assert scripted["dry_run"] is True and scripted["ttft_ms"]["p50"] is not None
