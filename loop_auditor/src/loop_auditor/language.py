"""The language of the messages people read: English unless ``GM_LANG`` names another.

One implementation for the loop auditor and the course that depends on it. Each package makes
its ``_`` with :func:`translator`, from its own gettext domain and ``locale`` folder (compiled
``.mo`` catalogs, committed and shipped as package data, so nothing is built at install time):

```python
_ = translator("loop_auditor", Path(__file__).parent / "locale")
print(_("step() ran while no parameter had a gradient"))
```

``GM_LANG`` is read each time a message is translated, so setting it after the import works:
``GM_LANG=zh_CN`` (Simplified Chinese); unset or empty means English, which is the messages
as written in the code. Any other value is a ``ValueError`` that lists the languages there are.

A message with values is translated as a whole and then filled in,
``_("{count} steps").format(count=count)``, so that a translation may move the values. A
message defined where no language is known yet (a module's constant) is marked with
:func:`N_` and translated where it is shown, with the ``translate`` of the same translator.
``tools/message_catalogs.py`` extracts every literal passed to ``_`` and ``N_``.

Imports no torch.
"""

from __future__ import annotations

import functools
import gettext
import os
from collections.abc import Callable
from pathlib import Path

ENV_VAR = "GM_LANG"
ENGLISH = "en"
# The languages there are: English, the messages as written, and each catalog's.
LANGUAGES = (ENGLISH, "zh_CN")


def current_language() -> str:
    """The language ``GM_LANG`` names now: ``"en"`` when it is unset or empty."""
    value = os.environ.get(ENV_VAR, "").strip()
    if not value:
        return ENGLISH
    if value not in LANGUAGES:
        raise ValueError(
            f"{ENV_VAR}={value!r} is not a language the messages are available in; "
            f"the languages are: {', '.join(LANGUAGES)} (unset or empty means {ENGLISH}). "
            f'Set it to one of them, for example os.environ["{ENV_VAR}"] = "zh_CN".'
        )
    return value


def N_(message: str) -> str:
    """Mark ``message`` for extraction and return it unchanged: it is translated where it is
    shown, by the translator's ``translate``."""
    return message


@functools.cache
def _catalog(domain: str, folder: str, language: str) -> gettext.NullTranslations:
    if language == ENGLISH:
        return gettext.NullTranslations()
    return gettext.translation(domain, folder, languages=[language])


class Translator:
    """``_(message)``: ``message`` in the current language. Made by :func:`translator`."""

    def __init__(self, domain: str, folder: Path | str):
        self.domain, self.folder = domain, str(folder)

    def __call__(self, message: str) -> str:
        return self.translate(message)

    def translate(self, message: str) -> str:
        """``message`` (an English message marked with ``_`` or ``N_`` where it is written)
        in the current language; a message the catalog does not hold stays as it is."""
        return _catalog(self.domain, self.folder, current_language()).gettext(message)

    def __repr__(self) -> str:
        return f"translator({self.domain!r}, {self.folder!r})"


def translator(domain: str, folder: Path | str) -> Callable[[str], str]:
    """The ``_`` of gettext ``domain``, whose catalogs are ``folder/<language>/LC_MESSAGES/
    <domain>.mo``; each catalog is read once."""
    if not isinstance(domain, str) or not domain:
        raise TypeError(
            f"domain must be a gettext domain name such as 'loop_auditor', got {domain!r}"
        )
    return Translator(domain, folder)


# The loop auditor's own messages (its findings, its errors): domain loop_auditor.
_ = translator("loop_auditor", Path(__file__).with_name("locale"))
