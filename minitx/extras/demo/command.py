"""Serve the live demo page of a checkpoint (Gradio; ``pip install 'minitx[demo]'``).

Example:
    minitx-demo --checkpoint RUN.ckpt            # then open http://127.0.0.1:7860
    minitx-demo --checkpoint RUN.ckpt --port 8000

What the page shows, its limits (``--max-chars``, ``--max-pieces``) and why it binds to
127.0.0.1 unless ``--host`` says otherwise: `minitx.extras.demo.page` and the guide
(docs/guides/attention-maps.md, "The live demo").

Exit status: 0 when stopped with Ctrl-C (the server's normal end); 2 a usage error (missing
or foreign checkpoint, Gradio not installed, port taken, a ``--max-chars`` or
``--max-pieces`` below 1 or over what the model reads), one ``error: ...`` line.
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys

from minitx.cli.common import (
    OneLineArgumentParser,
    UsageError,
    add_checkpoint_argument,
    check_device,
    positive_int,
    run_cli,
)
from minitx.extras.demo.page import (
    DEFAULT_HOST,
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_PIECES,
    DEFAULT_PORT,
)


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = OneLineArgumentParser(
        description=(
            "Serve a live demo page of a minitx checkpoint: translate a sentence (greedy or "
            "beam search) and explore its attention. Offline; binds to localhost by default."
        ),
    )
    add_checkpoint_argument(parser)
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"interface to bind (default: {DEFAULT_HOST}, this machine only)",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default: {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--device", default="cpu", help="torch device, e.g. cpu, cuda (default: cpu)"
    )
    parser.add_argument(
        "--max-chars",
        type=positive_int,
        default=DEFAULT_MAX_CHARS,
        metavar="N",
        help=(
            "longest sentence the page translates, in characters; a longer one is refused "
            f"with a message on the page (default: {DEFAULT_MAX_CHARS:,})"
        ),
    )
    parser.add_argument(
        "--max-pieces",
        type=positive_int,
        default=None,
        metavar="N",
        help=(
            "longest sentence the page translates, in sentencepiece pieces; a longer one is "
            f"refused with a message on the page (default: {DEFAULT_MAX_PIECES}, or what the "
            "model reads if fewer; at most what the model reads, its max_positions - 1)"
        ),
    )
    return parser


def check_address(host: str, port: int) -> bool:
    """Refuse, before the model loads, an address the server cannot listen on: a host name
    that does not resolve, an address that is not this machine's, a port in use. (Gradio's
    server would log its own error lines first, then give up.)

    Returns:
        Whether the address is a loopback one (reachable from this machine only).

    Raises:
        UsageError: naming the address and why.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
            probe.bind(address)
    except OSError as exc:  # socket.gaierror is one too
        reason = exc.strerror or str(exc)
        raise UsageError(
            f"cannot serve on {host}:{port}: {reason}; choose another --port, or a --host of "
            "this machine (127.0.0.1, or 0.0.0.0 for every address)"
        ) from None
    return ipaddress.ip_address(address[0]).is_loopback


def run(args: argparse.Namespace) -> int:
    """Load the checkpoint, build the page, serve it until Ctrl-C."""
    from minitx.extras.demo.page import build_demo, import_gradio, launch  # Gradio loads only here

    if not check_address(args.host, args.port):  # the page has no login: say who can use it
        print(
            f"note: --host {args.host} serves the page beyond this machine: anyone who can "
            f"reach port {args.port} here can use it",
            file=sys.stderr,
            flush=True,
        )
    import_gradio()  # before loading the model: a missing extra is reported at once
    from minitx.translator import Translator

    translator = Translator.from_pretrained(args.checkpoint, device=args.device)
    demo = build_demo(translator, max_chars=args.max_chars, max_pieces=args.max_pieces)
    try:
        launch(demo, host=args.host, port=args.port)
    except OSError:  # Gradio: "Cannot find empty port in range ..."
        raise UsageError(
            f"cannot serve on {args.host}:{args.port}: the port is in use or the address is "
            "not this machine's; choose another --port or --host"
        ) from None
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 < args.port < 65536:
        parser.error(f"--port must be between 1 and 65535, got {args.port}")
    check_device(parser, args)
    return run_cli(run, args, handle_sigterm=False)


if __name__ == "__main__":
    sys.exit(main())
