"""The rows of a sweep as they are measured: global rank 0 appends each one to a JSON-lines file, the command
reads them back while the sweep runs (to print each row like nccl-tests) and after an interrupt (to keep the
rows measured so far in its result). One JSON object per line, the first one the run's header."""
from __future__ import annotations

import json
import os


class FeedWriter:
    """Rank 0's side: each record is one ``write`` of one whole line, flushed, so a reader never takes half of
    one and a rank killed mid-sweep leaves every row it finished."""

    def __init__(self, path: str | None):
        self.path = path

    def put(self, record: dict) -> None:
        if not self.path:
            return
        line = json.dumps(record, separators=(",", ":")) + "\n"
        try:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line)
        except OSError:
            self.path = None  # the command's temp dir is gone (it is ending): the document still has every row


class FeedReader:
    """The command's side: the complete lines written since the last call, parsed; a partial last line waits
    for its end. Bounded reads: one call takes at most ``max_bytes``."""

    def __init__(self, path: str | None, max_bytes: int = 4 << 20):
        self.path, self.max_bytes = path, max_bytes
        self.offset = 0
        self.header: dict | None = None
        self.rows: list[dict] = []

    def poll(self) -> list[dict]:
        """The new records (the header first, once); every row read so far stays in ``self.rows``."""
        if not self.path:
            return []
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read(self.max_bytes)
        except OSError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        new = []
        for raw in chunk[:end].splitlines():
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            if "header" in record:
                self.header = record["header"]
            elif "row" in record:
                self.rows.append(record["row"])
            new.append(record)
        return new


def feed_path(result_path: str | None) -> str | None:
    """Where the rows go: beside rank 0's result file (the command's own temporary directory)."""
    return os.path.join(os.path.dirname(result_path), "rows.jsonl") if result_path else None
