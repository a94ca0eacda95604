"""Decodes a Stampede .hlog with the independent HdrHistogram_py implementation and prints
the merged response-time percentiles as JSON: {"count": N, "p50": v, "p90": v, "p99": v, "max": v}."""
import json
import sys

from hdrh.histogram import HdrHistogram

total = HdrHistogram(1, 3_600_000_000, 3)
with open(sys.argv[1]) as f:
    for line in f:
        if not line.startswith("Tag=response_time,"):
            continue
        encoded = line.rstrip("\n").split(",")[4]
        total.add(HdrHistogram.decode(encoded))
print(json.dumps({
    "count": total.get_total_count(),
    "p50": total.get_value_at_percentile(50.0),
    "p90": total.get_value_at_percentile(90.0),
    "p99": total.get_value_at_percentile(99.0),
    "max": total.get_highest_equivalent_value(total.get_max_value()),
}))
