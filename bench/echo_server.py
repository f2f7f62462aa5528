"""Reference gRPC server for `make bench`: echoes bytes, no work (raw round-trip cost)."""

import sys
from concurrent import futures

import grpc


def main() -> None:
    port = int(sys.argv[1])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16),
                         options=[("grpc.max_receive_message_length", 64 << 20),
                                  ("grpc.max_send_message_length", 64 << 20)])
    handler = grpc.unary_unary_rpc_method_handler(lambda req, ctx: req[:16])
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Echo", {"Echo": handler}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
