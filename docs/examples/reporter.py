"""An agent that answers with a picture and a file beside its text (docs/agents.md#images-
and-files): the gateway uploads each and sends it after the text, once, whatever dies when.

Run it: PYTHONPATH=docs/examples GATEWAY_AGENT=reporter:factory feishu-gateway demo
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from gateway.agents.chart import bar_chart
from gateway.core.media import BadMedia, File, Image
from gateway.core.model import AgentContext, Turn

SALES = {"Mon": 12, "Tue": 19, "Wed": 7, "Thu": 15, "Fri": 22}


class Reporter:
    def run(self, turn: Turn) -> Iterator[str | Image | File]:
        yield f"This week's sales, as you asked ({turn.text!r}):"
        yield Image(bar_chart(list(SALES.values())), name="sales.png")  # bytes or a path
        table = io.StringIO()
        csv.writer(table).writerows([("day", "sales"), *SALES.items()])
        yield File(table.getvalue().encode(), name="sales.csv")
        try:
            turn.send(Image("/no/such/chart.png"))  # sent at once; this one is refused
        except BadMedia as error:  # made before any upload: too large, empty, unreadable
            yield f"\n(and no old chart: {error})"


def factory(session_key: str, context: AgentContext) -> Reporter:
    return Reporter()
