"""The generated protobuf/gRPC code must match bk_spark/proto/bookie.proto (`make proto`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ["bookie_pb2.py", "bookie_pb2_grpc.py", "bookie_pb2.pyi"]


def test_generated_protobuf_code_is_not_stale(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    (out / "bk_spark" / "proto").mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT}", f"--python_out={out}",
         f"--grpc_python_out={out}", f"--pyi_out={out}", "bk_spark/proto/bookie.proto"],
        check=True, cwd=ROOT)
    for name in GENERATED:
        fresh = (out / "bk_spark" / "proto" / name).read_text()
        committed = (ROOT / "bk_spark" / "proto" / name).read_text()
        assert fresh == committed, f"bk_spark/proto/{name} is stale: run `make proto`"
