"""Keys never reach the disk: a `Redactor` knows the secret values of a run and blanks them out of
whatever is written.

A provider that refuses a key often quotes it in its error ("Incorrect API key provided: sk-..."),
and an error travels far: into the ledger, the episode's result, the summary's failure reasons, the
report, the checkpoint of the node that raised it, the error file of a crash. Every writer of those
files passes its text (or bytes) through the redactor, which replaces each secret it knows:

- in text: the secret, also as JSON, HTML and URL escape it and as base64 carries it (alone or
  inside a longer encoded value, such as `user:key` in a Basic header), becomes `sk-…[redacted]`
  (its first three characters when it has 16 or more, else `[redacted]` alone); so does a secret
  cut short by a writer that clips long messages (its first `CUT_SECRET_CHARS` characters or more,
  ending where the text or a word ends);
- in bytes (a serialized checkpoint), the same, byte for byte, by as many `*`: lengths inside the
  serialization stay right.

What counts as a secret: every value the run's settings hold as a key (a `SecretStr`, a field named
like a key — `api_key`, `token`, `password`, ... — the value of each variable an `api_key_env`
names, every header of a `headers` / `extra_headers` mapping named like a credential — `api-key`,
`X-Api-Key`, `x-goog-api-key`, `Authorization`, `Cookie` — and, in any URL a setting or a variable
holds (an `api_base`), its password and each query parameter named like a key: `?api-key=`,
`?key=`, `?sig=`), and the value of every environment variable named like a key (`OPENAI_API_KEY`,
`TAVILY_API_KEY`, `ATELIER_API_KEY`, `HF_TOKEN`, ...: litellm and the web services read those
themselves). A value shorter than `MIN_SECRET_CHARS` is no key (placeholders such as `EMPTY` or
`none`, which local servers take), and blanking it would garble ordinary words.

The run owns its redactor (`runs.runner.Runner.redactor`) and installs it for the time it runs
(`redacting`); writers deep in the stack (the ledger, the checkpointer, the response cache) find it
with `active_redactor()`, which outside a run gives the environment's. A command installs one for
its command line and environment, and each recipe it loads teaches that one the recipe's keys
(`learn_secrets`), so whatever the command prints — a preflight's problems, an error — leaves them out.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import functools
import html
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit

from pydantic import BaseModel, SecretBytes, SecretStr

MIN_SECRET_CHARS = 8
CUT_SECRET_CHARS = 8  # a secret clipped to this many characters or more is still redacted
REDACTED = "[redacted]"
KEY_FLAGS = ("--api-key", "--token")  # command-line options whose value is a key

# A name that holds a key, as an environment variable (OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY,
# HF_TOKEN) or as a settings field (api_key, token, password, authorization): the key word ends it.
_KEY_NAME = re.compile(
    r"(?:^|[_-])(?:API[_-]?KEY|ACCESS[_-]KEY|SECRET(?:[_-]KEY)?|TOKEN|PASSWORD|PASSWD|AUTHORIZATION)$", re.IGNORECASE
)
# A header or a URL's query parameter that carries a credential: those names, and a bare `key`
# (`x-goog-api-key`, `?key=`), `auth`, `cookie`, `sig` / `signature` (a signed URL), `code` (Azure's).
_CREDENTIAL_NAME = re.compile(r"(?:^|[_-])(?:KEY|AUTH|COOKIE|SIG|SIGNATURE)$|^CODE$", re.IGNORECASE)
_KEY_ENV_FIELD = "api_key_env"  # a field naming the environment variable that holds the key
_BEARER = re.compile(r"^(?:Bearer|Basic|Token)\s+", re.IGNORECASE)
_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s\"'<>]+", re.IGNORECASE)


def is_key_name(name: str) -> bool:
    """Whether a variable or field of this name holds a key."""
    return bool(_KEY_NAME.search(name))


def is_credential_name(name: str) -> bool:
    """Whether a header or a URL's query parameter of this name carries a credential."""
    return is_key_name(name) or bool(_CREDENTIAL_NAME.search(name))


def url_secrets(text: str) -> set[str]:
    """The credentials the URLs in `text` carry: a password, and each query parameter named like a key
    (as written and decoded)."""
    found: set[str] = set()
    for url in _URL.findall(text):
        try:
            parts = urlsplit(url)
            password = parts.password
        except ValueError:
            continue  # not a URL after all (a bad port, a stray bracket)
        if password:
            found |= {password, unquote(password)}
        for pair in parts.query.split("&"):
            name, _, raw = pair.partition("=")
            if raw and is_credential_name(unquote(name)):
                value = unquote(raw.replace("+", " "))
                found |= {raw, value, unquote(raw), quote(value, safe=""), quote_plus(value, safe="")}
    return found


def key_variables(environ: Mapping[str, str] | None = None) -> set[str]:
    """The values of the environment variables named like keys, and the credentials of the URLs
    any variable holds (`OPENAI_API_BASE=https://...?api-key=...`)."""
    environ = os.environ if environ is None else environ
    found = {value for name, value in environ.items() if is_key_name(name) and value}
    for value in environ.values():
        if "://" in value:
            found |= url_secrets(value)
    return found


def secrets_in(settings: Any, environ: Mapping[str, str] | None = None) -> set[str]:
    """Every key `settings` holds (pydantic models, dicts and lists, walked to the bottom): secret
    fields, fields named like a key, and the values of the variables `api_key_env` fields name."""
    environ = os.environ if environ is None else environ
    found: set[str] = set()

    def walk(value: Any, name: str = "") -> None:
        if isinstance(value, SecretStr):
            found.add(value.get_secret_value())
        elif isinstance(value, SecretBytes):
            found.add(value.get_secret_value().decode("utf-8", "replace"))
        elif isinstance(value, BaseModel):
            for field in type(value).model_fields:
                walk(getattr(value, field), field)
            for field, item in (value.__pydantic_extra__ or {}).items():
                walk(item, field)
        elif isinstance(value, Mapping):
            headers = "headers" in name.lower()
            for key, item in value.items():
                if headers and isinstance(item, str) and is_credential_name(str(key)):
                    found.add(item)
                    found.add(_BEARER.sub("", item))
                walk(item, str(key))
        elif isinstance(value, (list, tuple, set, frozenset)):
            for item in value:
                walk(item, name)
        elif isinstance(value, str) and value:
            if name == _KEY_ENV_FIELD and environ.get(value):
                found.add(environ[value])
            elif is_key_name(name):
                found.add(value)
                found.add(_BEARER.sub("", value))  # `Authorization = "Bearer KEY"`: the key alone too
            if "://" in value:
                found.update(url_secrets(value))

    walk(settings)
    return found


def key_flag_values(argv: Iterable[str]) -> set[str]:
    """The values a command line gives its key options (`--api-key KEY`, `--api-key=KEY`)."""
    found, args = set(), list(argv)
    for i, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        if flag in KEY_FLAGS:
            if equals:
                found.add(value)
            elif i + 1 < len(args):
                found.add(args[i + 1])
    return found


def _marker(piece: str) -> str:
    return f"{piece[:3]}…{REDACTED}" if len(piece) >= 16 else REDACTED


def _alnum_byte(byte: int) -> bool:
    return byte < 128 and chr(byte).isalnum()  # a UTF-8 lead byte starts a character no key continues with here


def _base64_forms(secret: str) -> set[str]:
    """The characters that base64 (standard and URL-safe) writes for `secret` wherever it sits in the
    encoded bytes: for each of the three alignments, the run of characters that only its bytes decide."""
    data = secret.encode()
    forms = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data).decode().rstrip("=")
        start, end = -(-8 * offset // 6), 8 * (offset + len(data)) // 6
        piece = encoded[start:end]
        if len(piece) >= MIN_SECRET_CHARS:
            forms |= {piece, piece.replace("+", "-").replace("/", "_")}
    return forms


def _json_forms(secret: str) -> set[str]:
    """JSON string bodies: `json.dumps` both ways, Jinja's `tojson` (`<>&'` as `\\u00XX`), a `/`
    written `\\/`, every character as a `\\uXXXX` escape (lower- and upper-case hex), and each of
    them escaped once more."""
    plain, ascii_only = json.dumps(secret, ensure_ascii=False)[1:-1], json.dumps(secret)[1:-1]
    html_safe = {ord(c): f"\\u{ord(c):04x}" for c in "<>&'"}
    units = secret.encode("utf-16-be")
    escaped = "".join(f"\\u{int.from_bytes(units[i : i + 2], 'big'):04x}" for i in range(0, len(units), 2))
    forms = {plain, ascii_only, escaped, escaped.upper().replace("\\U", "\\u")}
    for form in (plain, ascii_only):
        forms |= {form.translate(html_safe), form.replace("/", "\\/")}
    # and each of those inside a JSON string once more (an escaped echo kept in a JSON record)
    return forms | {json.dumps(form, ensure_ascii=False)[1:-1] for form in forms}


def _html_forms(secret: str) -> set[str]:
    """HTML text and attributes: `html.escape` with and without quotes, Jinja's / markupsafe's
    `&#34;` `&#39;`, and every character as a decimal or hexadecimal character reference."""
    escaped = html.escape(secret)
    return {
        escaped,
        html.escape(secret, quote=False),
        escaped.replace("&quot;", "&#34;").replace("&#x27;", "&#39;"),
        "".join(f"&#{ord(c)};" for c in secret),
        "".join(f"&#x{ord(c):x};" for c in secret),
    }


def _written_forms(secret: str) -> set[str]:
    """How a writer may have spelled the secret: as is, JSON-escaped, HTML-escaped, URL-encoded (as a
    query value, as a form value, as a path), inside base64."""
    return {
        secret,
        *_json_forms(secret),
        *_html_forms(secret),
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
        quote(secret),
        *_base64_forms(secret),
    }


def _trie_pattern(heads: Iterable[str]) -> str:
    """One regular expression matching any of `heads` (a trie: at each character one branch, so
    the scan costs about one step per character of the text, however many heads there are)."""
    trie: dict = {}
    for head in heads:
        node = trie
        for char in head:
            node = node.setdefault(char, {})
        node[""] = {}

    def pattern(node: dict) -> str:
        branches = [re.escape(char) + pattern(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        alternation = branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"
        return f"(?:{alternation})?" if "" in node else alternation

    return pattern(trie)


def _common_length(text: str | bytes, start: int, form: str | bytes) -> int:
    """How many characters of `form` the text repeats from `start` on."""
    length = 0
    for mine, theirs in zip(text[start : start + len(form)], form, strict=False):
        if mine != theirs:
            break
        length += 1
    return length


class Redactor:
    """Blanks out a fixed set of secrets (see the module docstring).

    Every written form of every secret is found in one scan: a precompiled trie of their first
    `CUT_SECRET_CHARS` characters finds where one may start; there the longest form the text repeats
    decides what is blanked (a secret whole — whatever characters it is made of — or cut short where
    the text ends or a character follows that no key would continue with: not a letter or digit)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: frozenset[str] = frozenset()
        self._by_head: dict[str, list[str]] = {}
        self._bytes_by_head: dict[bytes, list[bytes]] = {}
        self._pattern: re.Pattern[str] | None = None
        self._bytes_pattern: re.Pattern[bytes] | None = None
        self.learn(secrets)

    def learn(self, secrets: Iterable[str]) -> None:
        """Blank these secrets too from now on (a command that has just read a recipe's keys)."""
        kept = self.secrets | {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_CHARS}
        if kept == self.secrets:
            return
        by_head: dict[str, list[str]] = {}
        for form in sorted({form for s in kept for form in _written_forms(s)}, key=len, reverse=True):
            by_head.setdefault(form[:CUT_SECRET_CHARS], []).append(form)
        bytes_by_head: dict[bytes, list[bytes]] = {}
        for encoded in (f.encode() for forms in by_head.values() for f in forms):
            bytes_by_head.setdefault(encoded[:CUT_SECRET_CHARS], []).append(encoded)
        self._by_head, self._bytes_by_head, self.secrets = by_head, bytes_by_head, frozenset(kept)
        self._pattern = re.compile(_trie_pattern(by_head))
        # bytes: the same trie over each head's UTF-8 bytes, as latin-1 characters of a bytes pattern
        self._bytes_pattern = re.compile(_trie_pattern(h.decode("latin-1") for h in bytes_by_head).encode("latin-1"))

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def __repr__(self) -> str:  # never the secrets themselves
        return f"Redactor({len(self.secrets)} secrets)"

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Redactor:
        return cls(key_variables(environ))

    @classmethod
    def for_settings(cls, settings: Any, environ: Mapping[str, str] | None = None) -> Redactor:
        """The keys of `settings` (a recipe) and of the environment."""
        return cls(secrets_in(settings, environ) | key_variables(environ))

    @classmethod
    def for_command_line(cls, argv: Iterable[str], environ: Mapping[str, str] | None = None) -> Redactor:
        """What a command knows before it has read any settings: its key options and the environment."""
        return cls(key_flag_values(argv) | key_variables(environ))

    def _spans(self, data: Any, pattern: re.Pattern, by_head: dict, continues: Any) -> Iterator[tuple[int, int]]:
        """(start, end) of each secret (whole, or cut short) in `data`, in order, not overlapping."""
        found = pattern.search(data)
        while found is not None:
            start = found.start()
            forms = by_head[found.group()]
            end = start + max(_common_length(data, start, form) for form in forms)
            if any(end - start == len(form) for form in forms) or end == len(data) or not continues(data[end]):
                yield start, end
                found = pattern.search(data, end)
            else:  # another key that merely starts alike, or a word: another secret may start inside it
                found = pattern.search(data, start + 1)

    def redact(self, text: str) -> str:
        if self._pattern is None:
            return text
        out, position = [], 0
        for start, end in self._spans(text, self._pattern, self._by_head, str.isalnum):
            out += [text[position:start], _marker(text[start:end])]
            position = end
        return "".join(out) + text[position:] if out else text

    def redact_bytes(self, data: bytes) -> bytes:
        """`data` with every secret (as UTF-8, whole or cut short) overwritten by as many `*`."""
        if self._bytes_pattern is None:
            return data
        buffer = None
        for start, end in self._spans(data, self._bytes_pattern, self._bytes_by_head, _alnum_byte):
            buffer = buffer if buffer is not None else bytearray(data)
            buffer[start:end] = b"*" * (end - start)
        return bytes(buffer) if buffer is not None else data

    def redact_data(self, value: Any) -> Any:
        """Strings inside dicts, lists and tuples redacted (keys too); other values as they are."""
        if not self:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {self.redact_data(k): self.redact_data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.redact_data(v) for v in value)
        return value

    def redact_argv(self, argv: Iterable[str]) -> list[str]:
        """A command line as it may be shown or kept: key options' values blanked, secrets too."""
        out: list[str] = []
        hide_next = False
        for arg in argv:
            flag, equals, _ = arg.partition("=")
            if hide_next:
                out.append(REDACTED)
                hide_next = False
            elif flag in KEY_FLAGS and equals:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(self.redact(arg))
                hide_next = flag in KEY_FLAGS
        return out


_active: contextvars.ContextVar[Redactor | None] = contextvars.ContextVar("atelier_redactor", default=None)


@contextlib.contextmanager
def redacting(redactor: Redactor) -> Iterator[Redactor]:
    """Make `redactor` the one every writer uses inside this block (tasks and threads it starts
    included, as they copy the context)."""
    token = _active.set(redactor)
    try:
        yield redactor
    finally:
        _active.reset(token)


def active_redactor() -> Redactor:
    """The redactor of the run in progress, else one for the keys of the environment."""
    installed = _active.get()
    return installed if installed is not None else _redactor_of(frozenset(key_variables()))


@functools.lru_cache(maxsize=8)
def _redactor_of(secrets: frozenset[str]) -> Redactor:
    """One built redactor per set of secrets (a writer outside a run asks for the environment's each time)."""
    return Redactor(secrets)


def learn_secrets(settings: Any) -> None:
    """Teach the active redactor (the command's, or the run's) every key `settings` holds."""
    installed = _active.get()
    if installed is not None:
        installed.learn(secrets_in(settings))
