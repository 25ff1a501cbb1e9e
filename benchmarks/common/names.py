"""Names a researcher gives in a recipe (systems, judge labels): shown in reports, and each a folder
of the run folder. Two names that look the same must be the same name, and a name may not lead out
of the run folder.

- `checked_visible_name`: NFC; no spaces around it; no character that does not show (controls,
  format characters such as the bidi override U+202E, separators, private use, unassigned — and the
  default-ignorable ones that are letters or marks to Unicode: the combining grapheme joiner U+034F,
  variation selectors U+FE0F, Hangul fillers U+115F); no compatibility character that stands for
  another (the ligature `ﬁ`, fullwidth letters); and no letter of another script that passes for a
  Latin one among Latin letters (`gpt-rеsearcher` with a Cyrillic `е`, `οdr` with a Greek `ο`), nor
  the other way round (`Систeма` with a Latin `e`), nor a name written wholly in letters of another
  script that each pass for a Latin one (`ѕсоре`, all Cyrillic, reads as `scope`: Unicode's
  whole-script confusables); `bm25-λ` or a name in Cyrillic such as `Система` is fine.
- `checked_folder_name`: a visible name that is one path component: not blank, `.` or `..`, without
  `/`, `\\` or control characters.
- `visible_bidi`: text shown on a page (a model's answer, a prompt) with each bidirectional control
  written out as `[U+202E]`: a page shows what the text holds, not text it reorders.
"""

from __future__ import annotations

import unicodedata

# Characters that do not show as themselves: controls, format characters (bidi overrides such as
# U+202E, zero-width joiners), line and paragraph separators, private-use, surrogates, unassigned.
_INVISIBLE = ("Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn")
# Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties.txt) that are not already of
# an invisible category: they render as nothing, yet are letters (Lo) or marks (Mn) to unicodedata
_IGNORABLE = (
    (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0x1D173, 0x1D17A), (0xE0100, 0xE01EF), (0x2800, 0x2800),
)  # fmt: skip
# the letters of other scripts that look like Latin ones (after Unicode's confusables), and which
_LOOK_ALIKES = {
    "CYRILLIC": dict(zip("асеһіјӏорԛѕԝхуԁАВЕЅІЈКМНОРСТХУҮԚԜ", "acehijlopqswxydABESIJKMHOPCTXYYQW", strict=True)),
    "GREEK": dict(zip("ονικρυχαγΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ovikpuxayABEZHIKMNOPTYX", strict=True)),
    "ARMENIAN": dict(zip("օսցհոզՏՕՍ", "oughnqSOU", strict=True)),
}


def _ignorable(char: str) -> bool:
    return any(low <= ord(char) <= high for low, high in _IGNORABLE)


def _script(char: str) -> str | None:
    """The script of a letter, by the first word of its Unicode name (None: not a letter)."""
    if not unicodedata.category(char).startswith("L"):
        return None
    return unicodedata.name(char, "UNKNOWN").split()[0]


def checked_visible_name(name: str) -> str:
    """A name as a reader sees it, or a ValueError naming what would make two names look alike
    (see the module's docstring). Canonically equivalent spellings become one (NFC)."""
    name = unicodedata.normalize("NFC", name)
    if name != name.strip():
        raise ValueError(f"{name!r} has spaces around it: a name that looks like another must be it")
    hidden = [c for c in name if unicodedata.category(c) in _INVISIBLE or _ignorable(c)]
    if hidden:
        codes = ", ".join(f"U+{ord(c):04X}" for c in dict.fromkeys(hidden))
        raise ValueError(f"{name.encode('unicode_escape').decode()!r} holds characters that do not show ({codes})")
    plain = unicodedata.normalize("NFKC", name)
    if plain != name:
        raise ValueError(
            f"{name!r} holds characters that stand for others (ligatures, fullwidth or styled letters): write {plain!r}"
        )
    disguised = _latin_in_disguise(name)
    if disguised is not None:
        spelled, script = disguised
        raise ValueError(
            f"{name!r} is written in {script.title()} letters that each look like a Latin one: it reads as "
            f"{spelled!r}; write that name in Latin letters, or use a letter of {script.title()} that looks "
            "like none"
        )
    look_alike = _look_alike(name)
    if look_alike is not None:
        char, script, host = look_alike
        raise ValueError(
            f"{name!r} holds the {script.title()} letter {char!r} (U+{ord(char):04X}), which looks like a "
            f"{host.title()} one, among {host.title()} letters: write the name in one script"
        )
    return name


def _look_alike(name: str) -> tuple[str, str, str] | None:
    """A letter of a name's lesser script that passes for a letter of its main one (Latin and
    Cyrillic, Greek or Armenian mixed): (the letter, its script, the main script)."""
    letters = [(char, _script(char)) for char in name]
    counts: dict[str, int] = {}
    for _, script in letters:
        if script is not None:
            counts[script] = counts.get(script, 0) + 1
    if "LATIN" not in counts or not set(counts) & set(_LOOK_ALIKES):
        return None
    for other in set(counts) & set(_LOOK_ALIKES):
        table = _LOOK_ALIKES[other]
        if counts["LATIN"] >= counts[other]:  # a Latin name: another script's letter that looks Latin
            found = next((c for c, s in letters if s == other and c in table), None)
            host, script = "LATIN", other
        else:  # another script's name: a Latin letter that looks like one of its letters
            found = next((c for c, s in letters if s == "LATIN" and c in table.values()), None)
            host, script = other, "LATIN"
        if found is not None:
            return found, script, host
    return None


def _latin_in_disguise(name: str) -> tuple[str, str] | None:
    """A name with no Latin letter whose letters all belong to one script and each pass for a Latin
    letter: (the Latin name it reads as, its script)."""
    scripts = {_script(char) for char in name} - {None}
    if len(scripts) != 1 or (script := scripts.pop()) not in _LOOK_ALIKES:
        return None
    table = _LOOK_ALIKES[script]
    if all(char in table for char in name if _script(char) is not None):
        return "".join(table.get(char, char) for char in name), script
    return None


def checked_folder_name(name: str, what: str) -> str:
    """`name` (`what`: "a system's name") as one folder of the run folder, or a ValueError."""
    separators = any(c in "/\\" for c in name)
    controls = any(ord(c) < 32 or ord(c) == 127 for c in name)
    if name.strip() in ("", ".", "..") or separators or controls:
        raise ValueError(
            f"{name!r} is not a name: {what} is a folder in the run folder, so it may not be "
            "blank, '.' or '..', or hold '/', '\\' or control characters"
        )
    return checked_visible_name(name)


BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_BIDI_SHOWN = {ord(c): f"[U+{ord(c):04X}]" for c in BIDI_CONTROLS}


def visible_bidi(value: object) -> object:
    """Jinja's `finalize` for pages: a string's bidi controls written out — markup built in code (a
    response with its citations, a diff) included, kept markup (`[U+202E]` holds nothing to escape);
    other values as they are."""
    if isinstance(value, str):
        shown = str.translate(value, _BIDI_SHOWN)
        return value if shown == value else type(value)(shown)
    return value
