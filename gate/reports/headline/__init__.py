"""The answer at a glance: one rollout's headline, guardrail grid and reasons in words.

Every surface (`/ui`, the weekly report, `specgate rollout show`, the end of `specgate
demo`) calls this package, so they all say the same thing. The input is a verdict as the
gate stores it (decision, reason codes, per-cell estimates as JSON) plus the rollout's
policy and its pace; nothing here queries. Reason codes are parsed in `reasons` and
nowhere else (`parse_reason`), so the words can follow the gate's codes in one place.

- `acts`: a kill, hold or promote from the audit trail, which the headline leads with;
- `facts`: the stored verdict and the stage's pace, read into typed cells;
- `cells`: one cell in words (name, family, status, estimate, interval);
- `reasons`: reason codes parsed and said in sentences;
- `needs`: how many more pairs the next decision needs;
- `arm_words`: a rollout with several candidates: the winner or leader, each arm's line;
- `summary`: the headline: the decision's sentence, per-guardrail lines, reasons;
- `segment_grid`: the guardrail x segment grid;
- `rehearsal_words`: a recorded rehearsal's sentences;
- `text`: the headline and grid as terminal lines and Markdown.
"""

from gate.rehearse.analysis import confidence
from gate.reports.headline.acts import Act, act_of, promotion_next
from gate.reports.headline.arm_words import ArmLine
from gate.reports.headline.cells import (
    FAMILIES,
    LABELS,
    MINUS,
    PARITY_WORDS,
    RATIOS,
    ROW_ORDER,
    STATUS_COLOURS,
    STATUS_WORDS,
    TAIL_ORDER,
    Status,
    cell_status,
    family,
    format_estimate,
    format_interval,
    label,
)
from gate.reports.headline.facts import Cell, Facts, Pace
from gate.reports.headline.needs import Needs
from gate.reports.headline.reasons import (
    ParsedReason,
    parity_sentences,
    parse_reason,
    reason_sentences,
)
from gate.reports.headline.rehearsal_words import (
    ANSWER_WORDS,
    CALL_WORDS,
    NO_REHEARSAL,
    REHEARSAL_HEADERS,
    REHEARSAL_TITLE,
    arm_exactness,
    arms_answer,
    arms_note,
    call_words,
    rehearsal_answer,
    rehearsal_crossover,
    rehearsal_headers,
    rehearsal_sentence,
    rehearsal_speedup,
)
from gate.reports.headline.segment_grid import Grid, GridCell, GridRow, grid
from gate.reports.headline.summary import CAUSES, DECISION_WORDS, Headline, Line, headline
from gate.reports.headline.text import ARMS_TITLE, markdown, text_lines

__all__ = [
    "ANSWER_WORDS",
    "ARMS_TITLE",
    "CALL_WORDS",
    "CAUSES",
    "DECISION_WORDS",
    "FAMILIES",
    "LABELS",
    "MINUS",
    "NO_REHEARSAL",
    "PARITY_WORDS",
    "RATIOS",
    "REHEARSAL_HEADERS",
    "REHEARSAL_TITLE",
    "ROW_ORDER",
    "STATUS_COLOURS",
    "STATUS_WORDS",
    "TAIL_ORDER",
    "Act",
    "ArmLine",
    "Cell",
    "Facts",
    "Grid",
    "GridCell",
    "GridRow",
    "Headline",
    "Line",
    "Needs",
    "Pace",
    "ParsedReason",
    "Status",
    "act_of",
    "arm_exactness",
    "arms_answer",
    "arms_note",
    "call_words",
    "cell_status",
    "confidence",
    "family",
    "format_estimate",
    "format_interval",
    "grid",
    "headline",
    "label",
    "markdown",
    "parity_sentences",
    "parse_reason",
    "promotion_next",
    "reason_sentences",
    "rehearsal_answer",
    "rehearsal_crossover",
    "rehearsal_headers",
    "rehearsal_sentence",
    "rehearsal_speedup",
    "text_lines",
]
