"""MiroFlow (MiroMindAI/MiroFlow) as a command agent: its `main.py trace` on the job's brief.

    command = ["third_party/MiroFlow/.venv/bin/python", "graphs/external/wrappers/miroflow.py",
               "--checkout", "third_party/MiroFlow"]

Runs, in the checkout, `python main.py trace --task=<brief> --task_id=<case> --config_file_name=<config>
output_dir=<job folder>/miroflow <overrides...>` (MiroFlow's single-task entry: `utils/trace_single_task.py`,
hydra overrides after the flags) and reads the task log it writes, `<output_dir>/<task id>.log`
(its `TaskTracer` as JSON): `status` must be `completed` (else its `error` fails the episode); the
report is the main agent's last assistant message (its final summary), else `final_boxed_answer`.

What it maps: the brief (task and the user's context) is MiroFlow's task; MiroFlow's LLM reads
`OPENAI_BASE_URL` / `OPENAI_API_KEY` (the run's endpoint: every call ledgered, under the model
name its config gives, e.g. `gpt-5-mini`, which `call_roles` maps to a role), its Serper search and
Jina reader tools `SERPER_BASE_URL` / `JINA_BASE_URL` (the run's web). Job settings: `config`
(MiroFlow's config file name; default `agent_quickstart`) and `overrides` (hydra overrides, e.g.
`main_agent.max_turns=20` as PDR-Bench ran it). MiroFlow's `.env` in the checkout is read for what
the run does not set (the run's values win). Written against MiroFlow's `main.py trace` and
`TaskTracer` as of its 2025 releases; tested against a fake following them
(tests/fixtures/agents/fake_miroflow).
"""

from __future__ import annotations

import json
import os
import re
import sys

from wrapped import emit, fail, job_folder, run, start

DEFAULT_CONFIG = "agent_quickstart"


def final_message(log: dict) -> str:
    """The main agent's last assistant message (its final summary), as text."""
    history = (log.get("main_agent_message_history") or {}).get("message_history") or []
    for message in reversed(history):
        if message.get("role") != "assistant":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
        if isinstance(content, str) and content.strip():
            return content
    return ""


def main() -> None:
    root, job, settings = start(__doc__.splitlines()[0])
    task_id = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(job.get("case_id") or "task"))
    output_dir = job_folder() / "miroflow"
    overrides = [str(o) for o in settings.get("overrides") or []]
    argv = [
        sys.executable,
        "main.py",
        "trace",
        f"--task={job['brief']}",
        f"--task_id={task_id}",
        f"--config_file_name={settings.get('config') or DEFAULT_CONFIG}",
        f"output_dir={output_dir}",
        *overrides,
    ]
    run(argv, root, dict(os.environ), "miroflow")
    log_path = output_dir / f"{task_id}.log"
    if not log_path.exists():
        fail(f"MiroFlow wrote no task log at {log_path}")
    log = json.loads(log_path.read_text(encoding="utf-8"))
    if log.get("status") != "completed":
        fail(f"MiroFlow's task ended {log.get('status')!r}: {str(log.get('error') or '')[-500:]}")
    report = final_message(log) or str(log.get("final_boxed_answer") or "")
    emit(
        report,
        {"status": log.get("status"), "final_boxed_answer": log.get("final_boxed_answer"), "overrides": overrides},
    )


if __name__ == "__main__":
    main()
