"""The course's ``_``: its messages (checker verdicts and hints, errors, printouts) in the
language ``GM_LANG`` names, English unless it names another (the Chinese notebooks' setup cell
sets ``zh_CN``). The language choice is the loop auditor's (:mod:`loop_auditor.language`);
this module only names the course's gettext domain, ``helpers``, and its catalogs,
``helpers/locale/<language>/LC_MESSAGES/helpers.mo``.

``_("...")`` translates a literal now; ``N_("...")`` marks a module constant that
:func:`translate` translates where it is shown. ``python tools/message_catalogs.py`` extracts,
checks and compiles the catalogs.
"""

from __future__ import annotations

from pathlib import Path

from loop_auditor.language import LANGUAGES, N_, current_language, translator

__all__ = ["LANGUAGES", "N_", "_", "current_language", "translate"]

_ = translator("helpers", Path(__file__).with_name("locale"))
translate = _.translate
