#!/usr/bin/env bash
# Regenerates the gRPC stubs of schemas/zerotrace_api.proto into the query service.
# tests/unit/test_grpc_stubs.py runs the same generation into a temp folder and compares.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/services/query/zerotrace_query/api}"
"$ROOT/.venv/bin/python" -m grpc_tools.protoc -I "$ROOT/schemas" \
  --python_out="$OUT" --grpc_python_out="$OUT" --pyi_out="$OUT" "$ROOT/schemas/zerotrace_api.proto"
# protoc writes absolute imports; the stubs live inside a package.
sed -i 's/^import zerotrace_api_pb2 as/from zerotrace_query.api import zerotrace_api_pb2 as/' "$OUT/zerotrace_api_pb2_grpc.py"
