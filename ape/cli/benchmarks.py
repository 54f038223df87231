"""``ape benchmarks``: the catalogue of ready-to-run benchmarks (``ape.catalogue``).

One block per benchmark: its name (what ``ape init`` takes), what it measures, how it is
scored, where its format comes from, its Hugging Face dataset and whether that is in the
local cache here. ``--all`` adds the task names of the installed lm-evaluation-harness.
"""

from __future__ import annotations

import argparse
import textwrap

from ape.cli.exit_codes import EXIT_OK

NAME = "benchmarks"
HELP = "list the ready-to-run benchmarks (GSM8K, MMLU, ARC, ...) that `ape init NAME` writes a config for"

AVAILABLE = {
    "cached": "in the local Hugging Face cache (runs offline)",
    "download": "not here: downloaded on the first run with a network, or give local files (hf_data_files)",
    "no datasets": "not readable here: pip install 'ape-bench[hf]' (the datasets library)",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--all", action="store_true", help="also list the installed lm-evaluation-harness's tasks (needs lm_eval)"
    )


def main(args: argparse.Namespace) -> int:
    return benchmarks(show_all=args.all)


def benchmarks(*, show_all: bool = False) -> int:
    """Print the catalogue; with ``show_all``, lm-evaluation-harness's tasks too."""
    from ape.catalogue import availability, catalogue

    for item in catalogue():
        dataset = item.hf_path + (f" ({item.hf_name})" if item.hf_name else "") + f", split {item.hf_split}"
        needs = f"; needs the {', '.join(item.extras)} extra" if item.extras else ""
        scored = item.scoring + ("; the endpoint must score prompts (completions with echo)" if item.logprobs else "")
        print(f"{item.name}: {item.title}")
        for label, text in (
            ("measures", item.measures),
            ("scored", scored),
            ("format", item.format),
            ("data", f"{dataset}: {AVAILABLE[availability(item)]}{needs}"),
            *([("harness", _harness_line(item.lm_eval, item.logprobs))] if item.lm_eval else []),
        ):
            print(
                textwrap.fill(
                    text, width=100, initial_indent=f"  {label:9} ", subsequent_indent=" " * 12, break_on_hyphens=False
                )
            )
    print("\n`ape init NAME [DIR]` writes a runnable config for one of them.")
    if show_all:
        _print_lm_eval()
    return EXIT_OK


def _harness_line(task: str, logprobs: bool) -> str:
    """How the benchmark also runs as the harness's own task (``[task] lm_eval``)."""
    how = (
        "the harness builds each prompt and its choices, APE scores every choice's log-likelihood, and the "
        "harness's own metrics (acc; acc_norm where the task lists it) and group aggregation score them"
        if logprobs
        else "the harness's prompts, filters and metrics score the generated answers"
    )
    return f'runs as [task] lm_eval = "{task}" (needs the lm_eval extra): {how}; docs/lm_eval.md'


def _print_lm_eval() -> None:
    from ape.catalogue import lm_eval_tasks

    tasks = lm_eval_tasks()
    if tasks is None:
        print("lm-evaluation-harness is not installed: pip install lm-eval (its tasks are then listed here)")
        return
    print(f"\nlm-evaluation-harness tasks ({len(tasks)}):")
    print(textwrap.fill(", ".join(tasks), width=100))
