"""What a running raydag shows about itself: ``metrics`` (run and node counters and histograms, through Ray's
metrics when in Ray, nothing otherwise) and ``tracing`` (OpenTelemetry spans of runs, rounds, nodes and calls,
exported where ``OTEL_EXPORTER_OTLP_ENDPOINT`` says)."""
