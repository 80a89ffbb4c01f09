"""`minitx-experiment`: run the experiments that measure the claims made about attention.

Examples:
    minitx-experiment all                      # every experiment, 8 minutes per variant
    minitx-experiment scale --budget 4         # one experiment, 4 minutes per variant
    minitx-experiment norm --steps 2000        # a budget in steps: the same work anywhere
    minitx-experiment scores --variants dot    # one row (others in results.md are kept)
    minitx-experiment hard --checkpoint RUN.ckpt   # hard attention on a trained model
    minitx-experiment explain --checkpoint RUN.ckpt --sentences 200   # attention vs gradients
    minitx-experiment scores --config tiny --budget 0.2 --val-every 10   # a smoke run

Where the results and the training runs go, and when a run is reused: the guide
(docs/guides/experiments.md, "Running them") and `minitx.extras.experiments.runner`.

Exit status: 0 ok; 2 a usage error (one ``error: ...`` line); 130 Ctrl-C. A variant whose
training fails or diverges is a result (its status is in the table), not an error. Settings
that minitx-train refuses for every variant (the configs, ``--set``) end the command at the
first variant (`minitx.extras.experiments.runner`); when the training of every variant of an
experiment fails (not diverges), the input is to blame too: its table is written, then the
first failure is the error line.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from minitx.cli.common import (
    OneLineArgumentParser,
    UsageError,
    check_writable_dir,
    checkpoint_path,
    hub_verbosity,
    nonempty_path,
    positive_float,
    positive_int,
    run_cli,
)


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    from minitx.extras.experiments import EXPERIMENTS, Settings

    names, defaults = ", ".join(EXPERIMENTS), Settings()  # the defaults live in Settings
    parser = OneLineArgumentParser(
        description="Measure the claims made about attention: train variants of the 45-minute "
        "de->en recipe (--config long) within a time budget each, or decode a trained model "
        "(hard, explain), probe them, write tables and figures.",
        epilog=f"experiments: {names}; `all` runs them in this order.",
    )
    parser.add_argument(
        "experiments", nargs="+", choices=[*EXPERIMENTS, "all"], metavar="NAME",
        help=f"{names} or all",
    )  # fmt: skip
    bound = parser.add_mutually_exclusive_group()  # one bound: --steps won without a word
    bound.add_argument(
        "--budget", dest="budget_minutes", type=positive_float, metavar="MIN",
        default=defaults.budget_minutes,
        help="training minutes per variant, validation included "
        f"(default: {defaults.budget_minutes:g})",
    )  # fmt: skip
    bound.add_argument(
        "--steps", dest="max_steps", type=positive_int, metavar="N",
        help="train each variant for N optimizer steps instead of --budget minutes (the same "
        "work on any machine)",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=nonempty_path, default=defaults.out, metavar="DIR",
        help=f"output directory (default: {defaults.out})",
    )  # fmt: skip
    parser.add_argument(
        "--config", metavar="CONFIG",
        help="a config on top of the 45-minute de->en recipe (`long`) every variant starts "
        "from, a file or a packaged name (e.g. multi30k_en_de, or tiny for a smoke run)",
    )  # fmt: skip
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="a minitx-train override for every variant, e.g. trainer.max_epochs=2 (repeatable)",
    )  # fmt: skip
    parser.add_argument("--variants", nargs="+", metavar="VARIANT", help="run only these variants")
    parser.add_argument(
        "--val-every", type=positive_int, default=defaults.val_every, metavar="STEPS",
        help=f"validate every this many training steps (default: {defaults.val_every})",
    )  # fmt: skip
    parser.add_argument(
        "--probe-pairs", type=positive_int, default=defaults.probe_pairs, metavar="N",
        help=f"validation pairs read by the attention probes (default: {defaults.probe_pairs})",
    )  # fmt: skip
    parser.add_argument(
        "--checkpoint", type=checkpoint_path, metavar="CKPT",
        help="the trained model `hard` decodes and `explain` reads: a .ckpt file, a release "
        "directory or a hub repo id (default: the default settings trained within --budget)",
    )  # fmt: skip
    parser.add_argument(
        "--sentences", type=positive_int, metavar="N",
        help="explain: read only the first N test sentences (default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=int, default=defaults.seed,
        help=f"seed of the sampling probes ({defaults.seed})",
    )  # fmt: skip
    return parser


OWN_KEYS = {
    "trainer.max_steps": "steps",
    "trainer.max_time": "budget",
    "trainer.val_check_interval": "val-every",
    "trainer.check_val_every_n_epoch": "val-every",
    "runs_dir": "out",
    "run_name": "out",
}
"""minitx-train settings this command sets from its own flags (key -> flag), which --set may
not give."""


def run(args: argparse.Namespace) -> int:
    """Check the arguments, run the experiments in order, print where the results are."""
    from minitx.extras.experiments import EXPERIMENTS, Settings, run_experiment
    from minitx.extras.experiments.report import INDEX_HEADING, check_results_dir, write_index
    from minitx.extras.experiments.runner import REUSABLE

    hub_verbosity(verbose=False)  # offline, one line before the error, not each retry
    names = list(EXPERIMENTS) if "all" in args.experiments else args.experiments
    if args.variants:
        known = {v.name for n in names for v in EXPERIMENTS[n].variants}
        missing = [v for v in args.variants if v not in known]
        if missing:
            raise UsageError(
                f"--variants: {missing[0]!r} is no variant of {', '.join(names)}; "
                f"choose from {', '.join(sorted(known))}"
            )
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        raise UsageError(f"--set {bad[0]!r}: write KEY=VALUE, e.g. trainer.max_epochs=2")
    # A key the command's flags set: --set came after them and won, so the table's header
    # said other than the runs did. A key a variant sets: a variant with its own value
    # overrode --set, and one without trained with it, under that variant's name.
    owned = {key: f"--{flag} sets it" for key, flag in OWN_KEYS.items()} | {
        key: f"the experiment {n} varies it"
        for n in names
        for variant in EXPERIMENTS[n].variants
        for key in variant.overrides
    }
    taken = [o.split("=", 1)[0].removeprefix("--") for o in args.overrides]
    clash = next((key for key in taken if key in owned), None)
    if clash is not None:
        raise UsageError(f"--set {clash}: {owned[clash]}; leave it out of --set")
    if args.out.exists() and not args.out.is_dir():  # results and runs go inside it
        raise UsageError(f"--out {args.out} is a file; give a directory (new or earlier results)")
    check_writable_dir(args.out, "the output directory", "--out")
    readme = args.out / "README.md"
    if readme.is_file() and not readme.read_text(errors="replace").startswith(INDEX_HEADING):
        raise UsageError(  # the index is rewritten at the end: it would replace the user's file
            f"--out {args.out} holds a README.md that minitx-experiment did not write; give "
            "another directory (new, or one with earlier results)"
        )
    running = [  # those with a variant of --variants
        n
        for n in names
        if not args.variants or set(args.variants) & {v.name for v in EXPERIMENTS[n].variants}
    ]
    for name in running:  # each is rewritten whole at its end: none may hold the user's files
        check_results_dir(args.out / name)
    readers = [n for n in EXPERIMENTS if not EXPERIMENTS[n].trains]  # hard, explain
    for flag, given, by in (
        ("--checkpoint", args.checkpoint, readers),
        ("--sentences", args.sentences, ["explain"]),
    ):
        if given is not None and not set(by) & set(running):  # else it would be ignored
            raise UsageError(
                f"{flag} is read by {' and '.join(by)} only, not by {', '.join(running)}; "
                f"leave it out, or add {' or '.join(by)} to the experiments"
                + (" and a variant of it to --variants" if args.variants else "")
            )
    if args.checkpoint is not None and not any(EXPERIMENTS[n].trains for n in running):
        # hard and explain read the checkpoint: nothing trains, and these flags would be lost
        defaults = Settings()
        unread = [
            flag
            for flag, given in (
                ("--budget", args.budget_minutes != defaults.budget_minutes),
                ("--steps", args.max_steps is not None),
                ("--config", args.config is not None),
                ("--set", bool(args.overrides)),
                ("--val-every", args.val_every != defaults.val_every),
                ("--probe-pairs", args.probe_pairs != defaults.probe_pairs),
            )
            if given
        ]
        if unread:
            raise UsageError(
                f"{unread[0]} sets how a model trains, and with --checkpoint nothing trains "
                f"({' and '.join(running)} {'reads' if len(running) == 1 else 'read'} the "
                "trained model); leave it out"
            )
    if args.checkpoint is not None:
        from minitx.release import resolve

        # a hub repo id is downloaded now, and a missing path refused, before any variant
        # trains (`all` runs hard and explain last)
        args.checkpoint = resolve(args.checkpoint)
    settings = Settings(**{field.name: getattr(args, field.name) for field in fields(Settings)})
    for name in names:
        if name not in running:
            print(f"{name}: skipped, none of --variants is one of its variants", flush=True)
            continue
        if name == "explain":  # a checkpoint against its gradients: its own runner
            from minitx.extras.experiments.explain import run_explain

            run_explain(settings, args.variants, sentences=args.sentences)
        else:
            summary = run_experiment(name, settings, args.variants)
            statuses = [v["status"] for v in summary["variants"] if "status" in v]
            if statuses and not any(status in REUSABLE for status in statuses):
                # the same input failed every variant (a missing --config, a bad --set): a
                # usage error, not results
                raise UsageError(
                    f"{name}: the training of every variant failed, the first with: "
                    f"{statuses[0]} (the logs: {args.out / 'runs'}/*/train.log)"
                )
        print(f"{name}: {args.out / name / 'results.md'}", flush=True)
    print(f"all results: {write_index(args.out)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit status (0 ok, 2 usage error, 130 Ctrl-C, 143
    SIGTERM)."""
    args = build_parser().parse_args(argv)
    again = (
        "; the same command goes on from there (finished runs are reused, the interrupted "
        "one starts over)"
    )
    return run_cli(run, args, resumes=again)  # a SIGTERM is passed on: `run_training`


if __name__ == "__main__":
    sys.exit(main())
