"""Use mmpool's core as a library: plan SGLang's pools without the CLI.

Run: python examples/plan_from_python.py
"""

from mmpool_cli.core.units import format_size, parse_size
from mmpool_cli.engines.sglang.models import Budget, PlanRequest
from mmpool_cli.engines.sglang.plan import make_plan

# Qwen2.5-VL, one 1920x1080 image: 50,633,856 bytes of float32 pixel_values (see the README).
request = PlanRequest(
    budget=Budget(bytes=parse_size("2GiB"), source="flag"),
    workers=4,
    tp_size=8,
    feature_sizes=(50_633_856,),
)
plan = make_plan(request)
print(f"status: {plan.status}")
print(f"SGLANG_MM_FEATURE_CACHE_MB={plan.sglang_mm_feature_cache_mb}")
print(f"per worker: {format_size(plan.per_worker_bytes)}, usable {format_size(plan.usable_bytes_per_worker)}")
for feature in plan.features:
    fits = f"{feature.fit_per_worker} per worker, {feature.fit_per_node} per node"
    print(f"{format_size(feature.bytes)} features: {fits}")
for finding in plan.findings:
    print(f"{finding.severity}: {finding.code}: {finding.message}")
