"""What the report's pictures share: a figure that lays itself out, text wrapped to the figure's
width (never clipped, never cut) and a legend in as many columns as fit.

No pyplot: each Figure has its own Agg canvas and no global state, so a thread may draw.
"""
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.layout_engine import ConstrainedLayoutEngine

MARGIN = 0.15  # inches kept clear on each side of wrapped text and of the legend


def figure(width: float, height: float) -> Figure:
    """A constrained-layout figure (room is made for titles, tick labels and an outside legend)
    with a canvas of its own, so its text can be measured before it is drawn."""
    fig = Figure(figsize=(width, height), layout=ConstrainedLayoutEngine(w_pad=MARGIN / 2, h_pad=MARGIN / 2))
    FigureCanvasAgg(fig)
    return fig


def inches(fig: Figure, artist) -> tuple:
    """An artist's (width, height) on the figure, in inches."""
    box = artist.get_window_extent(fig.canvas.get_renderer())
    return box.width / fig.dpi, box.height / fig.dpi


def text_width(fig: Figure, text: str, fontsize: float) -> float:
    w, _, _ = fig.canvas.get_renderer().get_text_width_height_descent(text, FontProperties(size=fontsize),
                                                                       ismath=False)
    return w / fig.dpi


def wrap(fig: Figure, text: str, fontsize: float) -> str:
    """text in lines that each fit the figure's width, broken at spaces (and inside a word only
    when that word alone is too wide, a long path say). Every character is kept."""
    fits = lambda s: text_width(fig, s, fontsize) <= fig.get_figwidth() - 2 * MARGIN  # noqa: E731
    lines = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            longer = f"{line} {word}" if line else word
            if fits(longer):
                line = longer
                continue
            if line:
                lines.append(line)
            while len(word) > 1 and not fits(word):
                k = max((k for k in range(1, len(word)) if fits(word[:k])), default=1)
                lines.append(word[:k])
                word = word[k:]
            line = word
        lines.append(line)
    return "\n".join(lines)


def legend(fig: Figure, handles: list, fontsize: float):
    """The legend under the plot, in one row if it fits the figure's width, else in fewer columns."""
    for ncol in range(len(handles), 0, -1):
        found = fig.legend(handles=handles, loc="outside lower center", ncol=ncol, fontsize=fontsize,
                           frameon=False)
        if ncol == 1 or inches(fig, found)[0] <= fig.get_figwidth() - 2 * MARGIN:
            return found
        found.remove()


def grow_to_fit(fig: Figure, body: float, *artists):
    """Make the figure body inches tall plus the height of each artist (a wrapped title, a legend),
    so the plot keeps its size however many lines they take."""
    fig.set_figheight(body + sum(inches(fig, a)[1] + 0.1 for a in artists))
