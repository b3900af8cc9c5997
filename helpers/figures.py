"""A figure that carries its own description: the PNG a notebook shows, and the same figure in
words, its alt text, for a screen reader, the course site and any viewer that shows no images.

In the Chinese edition (``GM_LANG=zh_CN``) a figure's labels are Chinese when matplotlib finds
a font with Chinese characters (:data:`CJK_FONTS`; CI installs WenQuanYi Micro Hei); without
one they stay English, since matplotlib's own fonts would draw each Chinese character as a box.
The description is in the learner's language either way.
"""

from __future__ import annotations

import base64
import functools
import io
from collections.abc import Callable

import matplotlib
from matplotlib import font_manager
from matplotlib.figure import Figure

from helpers.translation import _, current_language

# Fonts with Chinese characters, the first one found is used: Debian's WenQuanYi and Noto
# packages, then what Windows and macOS ship.
CJK_FONTS = (
    "WenQuanYi Micro Hei",
    "WenQuanYi Zen Hei",
    "Noto Sans CJK SC",
    "Noto Sans SC",
    "Source Han Sans SC",
    "Microsoft YaHei",
    "SimHei",
    "PingFang SC",
    "Heiti SC",
)


def _known(name: str) -> bool:
    try:
        font_manager.findfont(font_manager.FontProperties(family=name), fallback_to_default=False)
    except ValueError:
        return False
    return True


@functools.cache
def cjk_font() -> str | None:
    """The first of :data:`CJK_FONTS` that matplotlib finds on this machine, else ``None``.
    A font installed after matplotlib made its font cache is found too: the system's fonts are
    looked through once, and one of them is added to matplotlib's list."""
    for name in CJK_FONTS:
        if _known(name):
            return name
    for path in font_manager.findSystemFonts():
        try:
            family = font_manager.get_font(path).family_name
        except (OSError, RuntimeError, ValueError):
            continue
        if family in CJK_FONTS:
            font_manager.fontManager.addfont(path)
            return family
    return None


class DescribedFigure:
    """A figure and its description. A notebook shows the PNG; the description is the
    output's text (``text/plain``) and its image's ``alt`` (in the output's metadata, which the
    course site uses). ``figure`` is the matplotlib Figure, ``description`` the text."""

    def __init__(self, draw: Callable[[Callable[[str], str]], Figure], description: str):
        """``draw(label)`` builds the figure, passing every label it writes through ``label``,
        which translates it where the figure is drawn in Chinese and leaves it English
        elsewhere."""
        if not isinstance(description, str) or not description.strip():
            raise ValueError(_("a figure needs a description: a non-empty string"))
        font = cjk_font() if current_language() == "zh_CN" else None
        label = _ if font else (lambda text: text)
        settings = {"font.family": [font, "DejaVu Sans"]} if font else {}
        with matplotlib.rc_context(settings):
            self.figure = draw(label)
            buffer = io.BytesIO()
            self.figure.savefig(buffer, format="png")
        self.png = buffer.getvalue()
        self.description = description

    def _repr_mimebundle_(self, include=None, exclude=None):
        data = {
            "image/png": base64.b64encode(self.png).decode("ascii"),
            "text/plain": self.description,
        }
        return data, {"image/png": {"alt": self.description}}

    def __repr__(self) -> str:
        return self.description
