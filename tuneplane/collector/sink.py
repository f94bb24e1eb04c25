"""The collector's way out: the `tuneplane.report` session of this process, so native metrics take the
same batching, retries, spilling and ledger as `log()`."""

from __future__ import annotations

from tuneplane.collector.sources import Point


class ReportSink:
    def start(self) -> bool:
        import tuneplane.report as report  # lazy: not needed to parse arguments or sources

        self._report = report
        return report.init(monitor_hardware=False)

    def send(self, points: list[Point]) -> None:
        log_records = getattr(self._report, "_log_records", None)
        if log_records is not None:
            log_records(points)  # keeps each point's own wall time
            return
        for step, _, values in points:
            self._report.log(values, step=step)

    def flush(self, timeout: float) -> bool:
        return bool(self._report.flush(timeout))

    def close(self) -> None:
        self._report.finish()

    def stats(self) -> dict[str, object]:
        return dict(self._report.stats())
