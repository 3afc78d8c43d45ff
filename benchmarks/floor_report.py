"""How the floor benchmarks (landing_floor.py, relay_floor.py) print their one result: the
whole document as one JSON line, or its medians as a two-column table (each round's figures,
``*_rounds``, and the ``settings`` left to the JSON)."""

from __future__ import annotations

import json
from collections.abc import Mapping


def print_report(doc: Mapping[str, object], as_json: bool) -> None:
    if as_json:
        print(json.dumps(doc))
        return
    shown = {k: v for k, v in doc.items() if not k.endswith("_rounds") and k != "settings"}
    width = max((len(k) for k in shown), default=0) + 2
    for key, value in shown.items():
        print(f"{key:{width}s}{value}")
