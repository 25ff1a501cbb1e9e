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


def _word_character(char: str) -> bool:
    return char.isalnum() or char in "-_"


def _word_byte(byte: int) -> bool:
    return byte < 128 and _word_character(chr(byte))  # a UTF-8 lead byte starts a character that is none


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


def _written_forms(secret: str) -> set[str]:
    """How a writer may have spelled the secret: as is, JSON-escaped, HTML-escaped (two styles),
    URL-encoded (two styles), inside base64."""
    escaped = html.escape(secret)
    return {
        secret,
        json.dumps(secret, ensure_ascii=False)[1:-1],
        json.dumps(secret)[1:-1],
        escaped,
        escaped.replace("&quot;", "&#34;").replace("&#x27;", "&#39;"),
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
        *_base64_forms(secret),
    }


class Redactor:
    """Blanks out a fixed set of secrets (see the module docstring)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: frozenset[str] = frozenset()
        self._forms: list[str] = []
        self._byte_forms: list[bytes] = []
        self.learn(secrets)

    def learn(self, secrets: Iterable[str]) -> None:
        """Blank these secrets too from now on (a command that has just read a recipe's keys)."""
        kept = self.secrets | {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_CHARS}
        if kept == self.secrets:
            return
        # the longest first: a secret holding another is blanked whole
        forms = sorted({form for s in kept for form in _written_forms(s)}, key=len, reverse=True)
        self._forms, self._byte_forms, self.secrets = forms, [f.encode() for f in forms], frozenset(kept)

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

    def redact(self, text: str) -> str:
        for form in self._forms:
            if form[: min(CUT_SECRET_CHARS, len(form))] in text:
                text = self._blank(text, form)
        return text

    def _blank(self, text: str, secret: str) -> str:
        """`text` with `secret` blanked wherever it is whole, or cut short at the text's or a word's end."""
        head = secret[: min(CUT_SECRET_CHARS, len(secret))]
        out, position = [], 0
        start = text.find(head)
        while start != -1:
            end = start + len(head)
            while end - start < len(secret) and end < len(text) and text[end] == secret[end - start]:
                end += 1
            whole = end - start == len(secret)
            if whole or end == len(text) or not _word_character(text[end]):
                out += [text[position:start], _marker(text[start:end])]
                position = end
            start = text.find(head, max(end, start + 1))
        return "".join(out) + text[position:] if out else text

    def redact_bytes(self, data: bytes) -> bytes:
        """`data` with every secret (as UTF-8, whole or cut short) overwritten by as many `*`."""
        for form in self._byte_forms:
            head = form[: min(CUT_SECRET_CHARS, len(form))]
            if head not in data:
                continue
            buffer, start = bytearray(data), data.find(head)
            while start != -1:
                end = start + len(head)
                while end - start < len(form) and end < len(data) and data[end] == form[end - start]:
                    end += 1
                whole = end - start == len(form)
                if whole or end == len(data) or not _word_byte(data[end]):
                    buffer[start:end] = b"*" * (end - start)
                start = data.find(head, max(end, start + 1))
            data = bytes(buffer)
        return data

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
    return installed if installed is not None else Redactor.from_environment()


def learn_secrets(settings: Any) -> None:
    """Teach the active redactor (the command's, or the run's) every key `settings` holds."""
    installed = _active.get()
    if installed is not None:
        installed.learn(secrets_in(settings))
