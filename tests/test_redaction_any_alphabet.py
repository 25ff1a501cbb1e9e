"""One redaction for keys of any alphabet, in every encoding the project writes.

Keys are generated from letters, digits, `/ + = _ - .` and non-ASCII letters (AWS secret keys and
base64-style keys hold `/` and `+`); each is written the ways Atelier's writers and a provider's echo
spell it — plain, URL-encoded (query, form, path), base64 at any offset of a longer value (`user:key`
in a Basic header), JSON (`json.dumps` both ways, Jinja's `tojson`, every character a `\\uXXXX`
escape, escaped once more inside a JSON record), HTML (`html.escape`, markupsafe, character
references) — inside arbitrary text, whole or cut short at the end; nothing of the key survives.
The sinks (terminal, config.json, results, ledger, report.html, checkpoints, the shared cache) are
tried with generated keys through a real run in `test_a_generated_key_is_in_no_file_of_a_run`.
"""

from __future__ import annotations

import base64
import html
import json
import string
from urllib.parse import quote, quote_plus

import markupsafe
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from jinja2.utils import htmlsafe_json_dumps

from atelier.benchmarks.common.redaction import REDACTED, Redactor

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
KEY_ALPHABET = st.one_of(
    st.sampled_from(string.ascii_letters + string.digits + "/+=_-."),
    st.characters(categories=("L", "N"), min_codepoint=0xA0),  # letters and digits of any script
)
keys = st.text(KEY_ALPHABET, min_size=16, max_size=64).filter(lambda k: len(set(k)) >= 6)
# text around a key: anything, but no character of the redaction's own marker
around = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="…[]"), max_size=30)


def every_char_escaped(key: str, upper: bool = False) -> str:
    units = key.encode("utf-16-be")
    escaped = "".join(f"\\u{units[i] << 8 | units[i + 1]:04x}" for i in range(0, len(units), 2))
    return escaped.upper().replace("\\U", "\\u") if upper else escaped


ENCODINGS = {
    "plain": lambda k: k,
    "url_query": lambda k: quote(k, safe=""),
    "url_form": lambda k: quote_plus(k, safe=""),
    "url_path": lambda k: quote(k),
    "json": lambda k: json.dumps(k)[1:-1],
    "json_utf8": lambda k: json.dumps(k, ensure_ascii=False)[1:-1],
    "jinja_tojson": lambda k: str(htmlsafe_json_dumps(k))[1:-1],
    "json_every_char": every_char_escaped,
    "json_every_char_upper": lambda k: every_char_escaped(k, upper=True),
    "json_in_json": lambda k: json.dumps(every_char_escaped(k))[1:-1],
    "html": html.escape,
    "markupsafe": lambda k: str(markupsafe.escape(k)),
    "html_decimal_refs": lambda k: "".join(f"&#{ord(c)};" for c in k),
    "html_hex_refs": lambda k: "".join(f"&#x{ord(c):x};" for c in k),
}


def not_recoverable(key: str, out: str, encoded: str) -> None:
    assert key not in out
    assert encoded not in out
    assert key[:12] not in out  # nor its start, which a marker never shows beyond three characters


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=keys, encoding=st.sampled_from(sorted(ENCODINGS)), before=around, after=around)
@example(key=AWS_SECRET, encoding="plain", before="key ", after="")
@example(key=AWS_SECRET, encoding="plain", before="X-Api-Key: ", after=" was refused")
@example(key="ab+cd/ef=gh_ij-kl.mn", encoding="json_every_char", before="", after="")
def test_a_key_of_any_alphabet_is_blanked_in_every_encoding(key, encoding, before, after):
    encoded = ENCODINGS[encoding](key)
    assume(key not in before + after and encoded not in before + after)
    redactor = Redactor([key])
    out = redactor.redact(before + encoded + after)
    not_recoverable(key, out, encoded)
    assert REDACTED in out
    # bytes (a checkpoint) the same, byte for byte
    data = (before + encoded + after).encode()
    blanked = redactor.redact_bytes(data)
    assert len(blanked) == len(data) and encoded.encode() not in blanked and key.encode() not in blanked


def test_the_aws_secret_key_of_the_issue_is_blanked_whole():
    redactor = Redactor([AWS_SECRET])
    assert redactor.redact(AWS_SECRET) == "wJa…[redacted]"
    assert redactor.redact(f'"X-Api-Key": "{AWS_SECRET}"') == '"X-Api-Key": "wJa…[redacted]"'
    assert redactor.redact(json.dumps({"k": every_char_escaped(AWS_SECRET)})).count("EXAMPLE") == 0


def bytes_left(encoded: str, left: str) -> list[range]:
    """The bytes of the base64 value `encoded` (as positions in what it encodes) that the pieces of it
    in `left` (what redaction left, in order) spell whole: a piece's characters sit where they sat,
    and a byte they only partly spell is not revealed by them."""
    found, position = [], 0
    for piece in left.replace("…", " ").replace(REDACTED, " ").split():
        at = encoded.find(piece, position)
        assert at >= 0, (piece, encoded)  # what is left is the value's own characters, in order
        position = at + len(piece)
        found.append(range(-(-6 * at // 8), 6 * position // 8))  # six bits a character
    return found


@settings(max_examples=200, deadline=None)
@given(
    key=keys,
    before=st.binary(max_size=7),
    after=st.binary(max_size=7),
    urlsafe=st.booleans(),
)
@example(key=AWS_SECRET, before=b"user:", after=b"", urlsafe=False)
# what is left spells, at another alignment or around the key, bytes the key also holds: not the key's
@example(key="\U0002c0000000000000012C\u00b2", before=b"\x10", after=b"", urlsafe=False)
@example(key="\u00c00000000000012\u0110\u00c1", before=b"\xc4\x90", after=b"", urlsafe=False)
def test_a_key_inside_a_longer_base64_value_is_blanked_at_any_offset(key, before, after, urlsafe):
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    encoded = encode(before + key.encode() + after).decode()
    out = Redactor([key]).redact(f"Authorization: Basic {encoded}")
    assert REDACTED in out
    held = range(len(before), len(before) + len(key.encode()))  # where the key's bytes are in the value

    def most_in_a_row(left: str) -> int:
        spelled = bytes_left(encoded, left)
        return max((len(range(max(r.start, held.start), min(r.stop, held.stop))) for r in spelled), default=0)

    assert most_in_a_row(encoded) == len(held)  # the value unredacted spells the whole key
    # what is left of the base64 value spells at most two of the key's bytes in a row
    assert most_in_a_row(out.removeprefix("Authorization: Basic ")) <= 2, out


@settings(max_examples=200, deadline=None)
@given(key=keys, cut=st.integers(min_value=8, max_value=63), encoding=st.sampled_from(["plain", "json", "html"]))
def test_a_key_cut_short_at_the_end_of_a_clipped_message_is_blanked(key, cut, encoding):
    encoded = ENCODINGS[encoding](key)
    assume(cut < len(encoded))
    clipped = "refused: " + encoded[:cut]
    out = Redactor([key]).redact(clipped)
    assert encoded[:cut] not in out and out.startswith("refused: ")


def test_text_that_merely_starts_like_a_key_is_left_alone():
    redactor = Redactor([AWS_SECRET, "sk-planted-3f9a7c2e5b1d4e6f8a0b2c4d6e8f0a1b"])
    other = "sk-planted-3f9a7c2e5b1d4e6f8a0b2c4d6e8f0XYZ"
    assert redactor.redact(other) == other
    assert redactor.redact("wJalrXUtnFEMIs are words") == "wJalrXUtnFEMIs are words"
    assert redactor.redact("nothing secret here") == "nothing secret here"
