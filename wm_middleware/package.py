"""The client libraries this instrumentation knows (matches the ``instruments`` extra)."""

_instruments = ("supermemory >= 3.0",)

_supports_metrics = True
